#!/usr/bin/env bash
# tests/run_suites.sh CPU_SUITE EMU_SUITE: the CPU suite without the [cuda] tests (no GPU is
# assumed), then the [cuda] suite in the emulated build; ends with one "N passed, N failed" line
# that adds up both. Exits non-zero when either suite fails.
set -uo pipefail
cpu_bin=$1
emu_bin=$2
passed=0
failed=0
status=0
run() {
    local label=$1; shift
    local log
    log=$(mktemp)
    "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n1)
    rm -f "$log"
    if [ -z "$line" ]; then
        echo "$label: no closing line (exit $rc)"
        failed=$((failed + 1))
        status=1
        return
    fi
    local p f
    p=${line%% passed*}
    f=${line#*, }; f=${f%% failed*}
    passed=$((passed + p))
    failed=$((failed + f))
    [ "$rc" -ne 0 ] && status=1
    echo "$label suite: $p passed, $f failed"
}
run cpu "$cpu_bin" "~[cuda]"
run "cuda (emulated)" "$emu_bin" "[cuda]"
echo "$passed passed, $failed failed"
exit $status
