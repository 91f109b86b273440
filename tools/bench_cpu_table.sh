#!/usr/bin/env bash
# tools/bench_cpu_table.sh: training-step speed on the CPU, this engine against PyTorch (issue 16).
#
#   bash tools/bench_cpu_table.sh                        # full sizes, all cores, 1 round
#   bash tools/bench_cpu_table.sh --threads 2 --rounds 2 # the same threads for every program
#   bash tools/bench_cpu_table.sh --quick --threads 1    # tiny models, 1 step: checks the kit runs
#
# For each model config below it runs, one after the other (interleaved, so that a burst of load
# hits all alike), with the same --threads:
#   ours          apps/bench (build it first: make)
#   torch 1.13    /usr/bin/python3 tools/bench_torch.py, eager, where that python imports torch
#                 (Debian's python3-torch); otherwise the column is left empty
#   torch 2.x     .venv/bin/python tools/bench_torch.py, eager and --mode compile (torch.compile,
#                 inductor); make .venv with tools/setup_torch.sh; without it the columns are empty
# and writes one markdown table: ms/step (median of the timed steps; with --rounds N > 1 the median
# of the N runs' figures), ours / PyTorch for each PyTorch column (< 1: this engine is faster),
# peak RSS of each program, and both parameter counts (they must agree: the twins are exact).
# The table goes to stdout and to --out (default bench/results/cpu-DATE[-quick].md, git-ignored);
# a run that fails shows as – and makes the exit status 1 (after the table is written).
#
# Options: --quick, --threads N (default: nproc), --steps N (default 5; quick 1), --warmup N
# (default 2; quick 1; torch.compile always gets at least 1, where it compiles), --rounds N
# (default 1), --only NAME[,NAME] (config names below), --out FILE.
# Time: the full table takes tens of minutes on 2 cores (ViT-Tiny at patch 2 is ~15 s a step, and
# every torch.compile run compiles first); run it on a quiet machine. --quick takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0 threads=$(nproc) steps="" warmup="" rounds=1 only="" out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --threads) threads="$2"; shift ;;
        --steps) steps="$2"; shift ;;
        --warmup) warmup="$2"; shift ;;
        --rounds) rounds="$2"; shift ;;
        --only) only="$2"; shift ;;
        --out) out="$2"; shift ;;
        -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
        *) echo "tools/bench_cpu_table.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

# The model configs: name, then the arguments both apps/bench and tools/bench_torch.py take.
# vit6 and vit-tiny are the issue's ViTs; lm, gau and lstm use apps/bench's documented LM size
# (the usage line at the top of apps/bench.cpp: 256 wide, 4 deep, 16 x 128 tokens, vocab 10,000).
if [ $quick = 0 ]; then
    configs=(
        "vit6     vit --dim 192 --depth 6 --heads 3 --patch 4 --batch 64"
        "vit-tiny vit --dim 192 --depth 12 --heads 3 --patch 2 --batch 64"
        "lm       lm --dim 256 --depth 4 --heads 4 --seq 128 --batch 16 --vocab 10000"
        "gau      gau --dim 256 --depth 4 --seq 128 --batch 16 --vocab 10000"
        "lstm     lstm --dim 256 --depth 4 --seq 128 --batch 16 --vocab 10000"
    )
    : "${steps:=5}" "${warmup:=2}"
else
    configs=(
        "vit6     vit --dim 32 --depth 1 --heads 2 --patch 8 --batch 2"
        "vit-tiny vit --dim 32 --depth 2 --heads 2 --patch 4 --batch 2"
        "lm       lm --dim 32 --depth 1 --heads 2 --seq 16 --batch 2 --vocab 101"
        "gau      gau --dim 32 --depth 1 --seq 16 --batch 2 --vocab 101"
        "lstm     lstm --dim 32 --depth 2 --seq 16 --batch 2 --vocab 101"
    )
    : "${steps:=1}" "${warmup:=1}"
fi
date_tag=$(date -u +%Y-%m-%d)
[ -n "$out" ] || out="bench/results/cpu-$date_tag$([ $quick = 1 ] && echo -quick).md"
mkdir -p "$(dirname "$out")"

[ -x apps/bench ] || { echo "tools/bench_cpu_table.sh: apps/bench not found (run make first)" >&2; exit 2; }
py=/usr/bin/python3
[ -x $py ] || py=python3  # parses the JSON lines; the standard library is enough
# The programs, by column; a column whose interpreter cannot import torch stays empty.
columns=(ours)
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then columns+=(t1eager); else
    echo "tools/bench_cpu_table.sh: /usr/bin/python3 cannot import torch: no PyTorch 1.13 column" >&2; fi
if .venv/bin/python -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; then
    columns+=(t2eager t2compile); else
    echo "tools/bench_cpu_table.sh: no torch 2.x in .venv (bash tools/setup_torch.sh): no 2.x columns" >&2; fi
command_of() {  # column -> the program and its fixed arguments
    case "$1" in
        ours) echo "apps/bench" ;;
        t1eager) echo "/usr/bin/python3 tools/bench_torch.py" ;;
        t2eager) echo ".venv/bin/python tools/bench_torch.py --mode eager" ;;
        t2compile) echo ".venv/bin/python tools/bench_torch.py --mode compile" ;;
    esac
}

logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT
results="$logdir/results.tsv"  # config, column, round, JSON line (or "failed")
: > "$results"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for cfg in "${configs[@]}"; do
    read -r name args <<< "$cfg"
    if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
    for ((r = 1; r <= rounds; r++)); do
        for col in "${columns[@]}"; do
            cmd="$(command_of $col) $args --steps $steps --warmup $warmup --threads $threads"
            echo "tools/bench_cpu_table.sh: [$name round $r] $cmd" >&2
            if line=$($cmd 2> "$logdir/err.log" | grep '^{' | tail -n1) && [ -n "$line" ]; then
                printf '%s\t%s\t%s\t%s\n' "$name" "$col" "$r" "$line" >> "$results"
            else
                echo "tools/bench_cpu_table.sh: failed: $cmd" >&2
                tail -n 5 "$logdir/err.log" >&2
                printf '%s\t%s\t%s\tfailed\n' "$name" "$col" "$r" >> "$results"
            fi
        done
    done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

{
    echo "# CPU training steps: this engine against PyTorch, $date_tag"
    echo
    echo "\`bash tools/bench_cpu_table.sh$([ $quick = 1 ] && echo ' --quick')$([ -n "$only" ] && echo " --only $only")" \
         "--threads $threads --steps $steps" \
         "--warmup $warmup --rounds $rounds\` at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
         "on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') ($(nproc) cores);" \
         "load average $load_start at the start, $load_end at the end."
    echo
    $py - "$results" "${configs[@]}" <<'EOF'
import json, statistics, sys

path, configs = sys.argv[1], [c.split(None, 1) for c in sys.argv[2:]]
heads = {"ours": "ours", "t1eager": "torch 1.13 eager", "t2eager": "torch 2.x eager",
         "t2compile": "torch 2.x compile"}
runs = {}  # (config, column) -> list of JSON dicts (None: failed)
for row in open(path):
    name, col, _, line = row.rstrip("\n").split("\t", 3)
    runs.setdefault((name, col), []).append(None if line == "failed" else json.loads(line))
cols = [c for c in heads if any(k[1] == c for k in runs)]
torch_cols = [c for c in cols if c != "ours"]

def med(name, col, key):
    vals = [d[key] for d in runs.get((name, col), []) if d]
    return statistics.median(vals) if vals else None

versions = {c: next((d["torch"] for (n, k), ds in runs.items() if k == c for d in ds if d), "")
            for c in torch_cols}
short = lambda v: ".".join(v.split(".")[:2])  # 2.15.0+cu132 -> 2.15 (the full versions go below the table)
label = lambda c: heads[c].replace("1.13", short(versions[c])).replace("2.x", short(versions[c])) if versions.get(c) else heads[c]
fmt = lambda v, f="{:.1f}": "–" if v is None else f.format(v)
print("| config | params (ours / torch) | " + " | ".join(f"{label(c)} ms" for c in cols) + " | " +
      " | ".join(f"ours / {label(c)}" for c in torch_cols) + " | peak RSS MB (" +
      " / ".join(label(c) for c in cols) + ") |")
print("| --- | ---: | " + " | ".join("---:" for _ in cols + torch_cols) + " | ---: |")
for name, args in configs:
    if not any(k[0] == name for k in runs):
        continue
    ours_p = med(name, "ours", "params")
    torch_p = sorted({d["params"] for (n, c), ds in runs.items() if n == name and c != "ours" for d in ds if d})
    same = ours_p is not None and all(p == ours_p for p in torch_p)
    params = f"{fmt(ours_p, '{:,.0f}')} / " + ("=" if same and torch_p else " ≠ ".join(f"{p:,}" for p in torch_p) or "–")
    ms = {c: med(name, c, "ms_per_step") for c in cols}
    ratio = [fmt(ms["ours"] / ms[c], "{:.2f}") if ms["ours"] and ms[c] else "–" for c in torch_cols]
    rss = " / ".join(fmt(med(name, c, "peak_rss_mb"), "{:.0f}") for c in cols)
    print(f"| {name} `{args}` | {params} | " + " | ".join(fmt(ms[c]) for c in cols) + " | " +
          " | ".join(ratio) + f" | {rss} |")
imp = {}  # PyTorch's RSS before any model is built, by column
for c in torch_cols:
    vals = [d["import_rss_mb"] for (n, k), ds in runs.items() if k == c for d in ds if d and "import_rss_mb" in d]
    if vals:
        imp[c] = statistics.median(vals)
print()
print("ms: median ms per training step (forward, backward, AdamW); ours / PyTorch < 1 means this engine is faster.")
where = {"t1eager": "/usr/bin/python3", "t2eager": ".venv/bin/python", "t2compile": ".venv/bin/python"}
print("PyTorch: " + ", ".join(sorted({f"{versions[c]} ({where[c]})" for c in torch_cols if versions[c]})) + "."
      if any(versions.values()) else "PyTorch: no PyTorch run succeeded.")
if imp:
    print("PyTorch's peak RSS includes its libraries before any model (" +
          ", ".join(f"{label(c)}: {v:.0f} MB" for c, v in imp.items()) +
          ("; this 2.x wheel is built with CUDA and maps its CUDA libraries too" if any("+cu" in v for v in versions.values())
           else "") + ") and, for compile, the compiler's memory.")
if "t2compile" in cols:
    print("torch.compile: compilation happens in the warm-up steps, not timed; nn.LSTM is not traced by Dynamo"
          " (graph break: it runs eagerly, the embedding and head are compiled).")
EOF
} > "$logdir/table.md"
cp "$logdir/table.md" "$out"
cat "$out"
echo "tools/bench_cpu_table.sh: wrote $out" >&2
failed=$(grep -c $'\tfailed$' "$results" || true)
[ "$failed" = 0 ] || { echo "tools/bench_cpu_table.sh: $failed run(s) failed (– in the table)" >&2; exit 1; }
