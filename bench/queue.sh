#!/usr/bin/env bash
# bench/queue.sh QUEUE_FILE LOG: run the commands of QUEUE_FILE one at a time, first line first.
# The file is re-read before every job, so jobs can be appended (or removed) while it runs;
# a finished job's line moves to QUEUE_FILE.done with its exit status and wall time.
# Used for the reduced-scale reproductions in docs/RESULTS.md (see bench/reproduce_cpu.sh).
set -u
queue="$1"; log="$2"
while true; do
    line="$(grep -v '^\s*\(#\|$\)' "$queue" | head -n1)"
    [ -z "$line" ] && break
    # Take the line out before running it, so an edit of the file cannot run it twice.
    grep -vxF -- "$line" "$queue" > "$queue.tmp"; mv "$queue.tmp" "$queue"
    start=$(date +%s)
    echo "=== $(date -Is) $line" >> "$log"
    bash -c "$line" >> "$log" 2>&1
    rc=$?
    echo "rc=$rc wall=$(( $(date +%s) - start ))s $line" >> "$queue.done"
done
