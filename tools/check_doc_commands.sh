#!/usr/bin/env bash
# tools/check_doc_commands.sh: the training commands the docs give a researcher still run.
#
#   tools/check_doc_commands.sh [FILE...]
#
# Default FILEs: README.md docs/REPRODUCE.md docs/RESULTS.md bench/reproduce_cpu.sh. A .sh file
# runs whole; in a .md file each code block (lines indented four spaces, after a blank line) that
# calls apps/train_vit, apps/train_lm or apps/gau_scale runs as one bash script. Both run in a
# scratch folder where
#   - apps/train_vit and apps/train_lm are this checkout's apps with --dry-run added: each checks
#     its flags and builds its model, and reads and writes nothing (apps/common/run.h);
#   - apps/gau_scale is this checkout's, run as it is (it reads and writes nothing, and its
#     documented sizes take about a second);
#   - every other app, every file of tools/, `make` and `python3` are stand-ins that do nothing, and
#     a glob that matches nothing expands to nothing (the runs it would list are not there).
# A command fails the check when the app refuses it (a renamed flag, a conflict, a model that does
# not build) or when two commands of one file name the same --out (the second run would overwrite
# the first). Each failure is printed with its file and command; the exit status is then 1.
# Run it from the repository root after `make`; tests/test_doc_commands.cpp runs it.
set -uo pipefail
repo=$(pwd)
for app in train_vit train_lm gau_scale; do
    [ -x "$repo/apps/$app" ] || { echo "check_doc_commands: $repo/apps/$app not found: run make first" >&2; exit 2; }
done
[ $# -gt 0 ] || set -- README.md docs/REPRODUCE.md docs/RESULTS.md bench/reproduce_cpu.sh

sandbox=$(mktemp -d)
trap 'rm -rf "$sandbox"' EXIT
mkdir -p "$sandbox/apps" "$sandbox/tools" "$sandbox/bin" "$sandbox/bench"
failures="$sandbox/failures.txt"
outs="$sandbox/outs.txt"
: > "$failures"

# The two training apps: the real ones, dry. A refusal is recorded and the script goes on, so that
# one run of the checker lists every command at fault.
for app in train_vit train_lm; do
    cat > "$sandbox/apps/$app" <<EOF
#!/usr/bin/env bash
log=\$(mktemp)
if ! OMP_NUM_THREADS=1 "$repo/apps/$app" "\$@" --dry-run > "\$log" 2>&1; then
    { echo "\$CHECK_SOURCE: apps/$app \$*"; grep -v '^[ {}]' "\$log" | sed 's/^/    /'; } >> "$failures"
fi
rm -f "\$log"
prev=""
for arg in "\$@"; do
    [ "\$prev" = "--out" ] && echo "\$CHECK_SOURCE \$arg" >> "$outs"
    prev=\$arg
done
exit 0
EOF
    chmod +x "$sandbox/apps/$app"
done
# gau_scale: the real one, whole (a command refused or failing is recorded likewise).
cat > "$sandbox/apps/gau_scale" <<EOF
#!/usr/bin/env bash
log=\$(mktemp)
if ! OMP_NUM_THREADS=1 timeout 120 "$repo/apps/gau_scale" "\$@" > "\$log" 2>&1; then
    { echo "\$CHECK_SOURCE: apps/gau_scale \$*"; tail -3 "\$log" | sed 's/^/    /'; } >> "$failures"
fi
rm -f "\$log"
exit 0
EOF
chmod +x "$sandbox/apps/gau_scale"
stand_in='#!/usr/bin/env bash
exit 0'
for src in "$repo"/apps/*.cpp; do
    name=$(basename "$src" .cpp)
    [ -e "$sandbox/apps/$name" ] || { echo "$stand_in" > "$sandbox/apps/$name"; chmod +x "$sandbox/apps/$name"; }
done
for tool in "$repo"/tools/*; do
    echo "$stand_in" > "$sandbox/tools/$(basename "$tool")"
    chmod +x "$sandbox/tools/$(basename "$tool")"
done
for cmd in make python3; do
    echo "$stand_in" > "$sandbox/bin/$cmd"
    chmod +x "$sandbox/bin/$cmd"
done

# Runs one script (a block of a .md file, or a .sh file) in the sandbox; `source` names it.
run_script() {
    local source=$1 script=$2
    if ! (cd "$sandbox" && PATH="$sandbox/bin:$PATH" INITLAB_DATA="$sandbox/no-data" CHECK_SOURCE="$source" \
          bash -O nullglob "$script" > "$sandbox/script.log" 2>&1); then
        { echo "$source: the script itself failed:"; tail -5 "$sandbox/script.log" | sed 's/^/    /'; } >> "$failures"
    fi
}

commands=0
for file in "$@"; do
    [ -f "$file" ] || { echo "check_doc_commands: $file: no such file" >&2; exit 2; }
    case "$file" in
    *.sh)
        # The script cds to its own folder's parent: its copy sits in the sandbox's bench/.
        cp "$file" "$sandbox/bench/$(basename "$file")"
        run_script "$file" "$sandbox/bench/$(basename "$file")"
        ;;
    *.md)
        # Split the code blocks into numbered scripts, named by their first line in the file.
        rm -f "$sandbox"/block-*.sh
        awk -v dir="$sandbox" '
            /^    / && (prev == "" || inblock) {
                if (!inblock) { n++; file = sprintf("%s/block-%03d-%d.sh", dir, n, NR) }
                inblock = 1; print substr($0, 5) > file; prev = $0; next
            }
            { if (inblock) close(file); inblock = 0; prev = $0 }' "$file"
        for block in "$sandbox"/block-*.sh; do
            [ -e "$block" ] || continue
            grep -q 'apps/\(train_vit\|train_lm\|gau_scale\)' "$block" || continue
            line=${block##*-}
            run_script "$file:${line%.sh}" "$block"
        done
        ;;
    *) echo "check_doc_commands: $file: neither .md nor .sh" >&2; exit 2 ;;
    esac
done

# The same --out twice in one file: the file of a source is what comes before its ':' line number.
if [ -s "$outs" ]; then
    commands=$(wc -l < "$outs")
    sed 's/:[0-9]* / /' "$outs" | sort | uniq -d | while read -r source out; do
        echo "$source: --out $out is given to more than one command" >> "$failures"
    done
fi
if [ -s "$failures" ]; then
    cat "$failures"
    echo "check_doc_commands: $(grep -c '^[^ ]' "$failures") failure(s)"
    exit 1
fi
echo "check_doc_commands: $commands training command(s) in $# file(s), all accepted by the apps"
