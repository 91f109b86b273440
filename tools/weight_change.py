#!/usr/bin/python3
"""tools/weight_change.py: how far training moved each weight from where the init put it.

For each float32 tensor of two checkpoints (by default a run's init.safetensors and
last.safetensors), the relative change ‖W − W₀‖ / ‖W₀‖ and the rms of the change, as a markdown
table; with several runs, one column of relative changes per run. A tensor that starts at zero
(a bias) has no relative change: its rms is reported instead, marked "(rms)".

    tools/weight_change.py runs/char-torch runs/char-mimetic
    tools/weight_change.py RUN --after best            # RUN/best.safetensors instead of last
    tools/weight_change.py --pair A.safetensors B.safetensors
    tools/weight_change.py RUN --match '*.attn.*' --json

Only the Python standard library is needed.
"""
import argparse
import fnmatch
import json
import math
import os
import sys

import safetensors_file as st


def fail(msg):
    sys.exit(f"weight_change.py: {msg}")


def changes(before_path, after_path, pattern):
    """{name: (relative change or None, rms of the change)} for the float32 tensors of both files."""
    try:
        h0, _, d0 = st.load(before_path)
        h1, _, d1 = st.load(after_path)
    except ValueError as e:
        fail(str(e))
    out = {}
    for name, info in h0.items():
        if info["dtype"] != "F32" or not fnmatch.fnmatchcase(name, pattern):
            continue
        if name not in h1 or h1[name]["shape"] != info["shape"]:
            fail(f"{after_path}: no tensor {name} of shape {info['shape']} (is it a checkpoint of the same model?)")
        w0, w1 = st.floats(h0, d0, name), st.floats(h1, d1, name)
        norm0 = math.sqrt(sum(v * v for v in w0))
        diff = math.sqrt(sum((b - a) ** 2 for a, b in zip(w0, w1)))
        out[name] = (diff / norm0 if norm0 > 0 else None, diff / math.sqrt(max(len(w0), 1)))
    if not out:
        fail(f"{before_path}: no float32 tensor matches {pattern}")
    return out


def cell(rel, rms):
    return f"{rel:.3f}" if rel is not None else f"{rms:.2e} (rms)"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="*", help="run directories (each with init.safetensors)")
    p.add_argument("--after", default="last", help="the run's checkpoint to compare: last | best (default last)")
    p.add_argument("--pair", nargs=2, metavar=("BEFORE", "AFTER"), help="two checkpoint files instead of runs")
    p.add_argument("--match", default="*", help="only tensors whose name matches this glob")
    p.add_argument("--json", action="store_true", help="one JSON object per run instead of the table")
    args = p.parse_args()
    if bool(args.runs) == bool(args.pair):
        fail("give run directories, or --pair BEFORE AFTER")
    if args.pair:
        columns = {args.pair[1]: changes(args.pair[0], args.pair[1], args.match)}
    else:
        columns = {}
        for run in args.runs:
            before = os.path.join(run, "init.safetensors")
            if not os.path.exists(before):
                fail(f"{run}: no init.safetensors (runs write it since commit 9d283f9; use --pair for older ones)")
            columns[run] = changes(before, os.path.join(run, args.after + ".safetensors"), args.match)
    if args.json:
        for run, col in columns.items():
            print(json.dumps({"run": run, "change": {n: {"relative": r, "rms": s} for n, (r, s) in col.items()}}))
        return
    names = list(next(iter(columns.values())))
    print("| tensor | " + " | ".join(os.path.basename(os.path.normpath(r)) for r in columns) + " |")
    print("| --- |" + " ---: |" * len(columns))
    for name in names:
        row = [cell(*col[name]) if name in col else "—" for col in columns.values()]
        print(f"| {name} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
