#!/usr/bin/python3
"""tools/adam_eps_share.py: where Adam's ε, not the gradient, sets the size of a weight's steps.

Adam's step for one entry is lr · m̂ / (√v̂ + ε), with v̂ = v / (1 − β₂ᵗ) the bias-corrected mean of
the squared gradient. Where √v̂ ≫ ε the step is about lr (times m̂/√v̂, at most 1); where √v̂ ≪ ε
it is lr · m̂ / ε: a plain SGD step with learning rate lr/ε, proportional to the gradient. A large
ε (train_vit's --adam-eps, 1e-3 in the structured-init paper's recipe) therefore slows exactly
the weights whose gradients are small, and makes their steps grow with the gradient, hence
with the size of the weights the gradient passes through (a query weight's gradient is
proportional to the key weights).

From a run's optimizer checkpoint (RUN/last.optim.safetensors, the state at its last step; the
step count t is in its metadata) and its config.json (--adam-eps; β₂ is 0.999 in both
trainers), for each weight matrix: the share of entries with √v̂ < ε, and the median of √v̂ / ε.
Tensors of every block with the same role are pooled (blocks.*.attn.q.weight); --per-tensor
lists each one. With several runs, one column pair per run.

    tools/adam_eps_share.py runs/vit-torch runs/vit-torch-eps1e-8
    tools/adam_eps_share.py RUN --match '*.attn.*' --per-tensor
    tools/adam_eps_share.py RUN --optim RUN/other.optim.safetensors --eps 1e-3

Only the Python standard library is needed.
"""
import argparse
import fnmatch
import json
import math
import os
import re
import sys

import safetensors_file as st

BETA2 = 0.999  # apps/train_vit.cpp and apps/train_lm.cpp construct Adam with β₂ = 0.999


def fail(msg):
    sys.exit(f"adam_eps_share.py: {msg}")


def run_eps(run):
    """--adam-eps from the run's config.json; train_lm has no such flag and uses 1e-8."""
    path = os.path.join(run, "config.json")
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e} (give --eps)")
    if "--adam-eps" in config:
        return float(config["--adam-eps"])
    if config.get("app") == "train_lm":
        return 1e-8
    fail(f"{path}: no --adam-eps and not a train_lm run (give --eps)")


def role(name, per_tensor):
    """blocks.3.attn.q.weight -> blocks.*.attn.q.weight (unless per_tensor)."""
    return name if per_tensor else re.sub(r"\.\d+\.", ".*.", name)


def shares(optim_path, eps, pattern, per_tensor):
    """{role: (entries, entries with √v̂ < ε, median √v̂/ε)} over the weights' exp_avg_sq tensors."""
    try:
        header, meta, data = st.load(optim_path)
    except ValueError as e:
        fail(str(e))
    try:
        t = int(meta["steps"])
    except (KeyError, ValueError):
        fail(f"{optim_path}: no step count ('steps') in its metadata: is it an optimizer checkpoint?")
    if t < 1:
        fail(f"{optim_path}: taken at step {t}, before any Adam step")
    correction = 1 - BETA2**t
    pooled = {}
    for key in sorted(header):
        if not key.endswith(".exp_avg_sq"):
            continue
        name = key[: -len(".exp_avg_sq")]
        if not fnmatch.fnmatchcase(name, pattern) or len(header[key]["shape"]) < 2:
            continue  # matrices only: biases and norm gains are not what an init scheme sets apart
        ratios = [math.sqrt(max(v, 0.0) / correction) / eps for v in st.floats(header, data, key)]
        pooled.setdefault(role(name, per_tensor), []).extend(ratios)
    if not pooled:
        fail(f"{optim_path}: no weight matrix matches {pattern} (no Adam state? an SGD run has none)")
    out = {}
    for r, ratios in pooled.items():
        ratios.sort()
        n = len(ratios)
        below = sum(1 for x in ratios if x < 1.0)
        median = ratios[n // 2] if n % 2 else 0.5 * (ratios[n // 2 - 1] + ratios[n // 2])
        out[r] = (n, below, median)
    return out, t


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run directories (each with config.json and an optimizer checkpoint)")
    p.add_argument("--optim", help="the optimizer checkpoint to read (one run only; default RUN/last.optim.safetensors)")
    p.add_argument("--eps", type=float, help="Adam's ε (default: the run's --adam-eps)")
    p.add_argument("--match", default="*", help="only weights whose name matches this glob")
    p.add_argument("--per-tensor", action="store_true", help="one row per tensor, not per role")
    p.add_argument("--json", action="store_true", help="one JSON object per run instead of the table")
    args = p.parse_args()
    if args.optim and len(args.runs) > 1:
        fail("--optim names one file: give one run with it")
    if args.eps is not None and not args.eps > 0:
        fail(f"--eps {args.eps}: ε must be > 0")
    columns = {}
    for run in args.runs:
        eps = args.eps if args.eps is not None else run_eps(run)
        path = args.optim or os.path.join(run, "last.optim.safetensors")
        if not os.path.exists(path):
            fail(f"{path}: no such file (runs write it at each checkpoint)")
        col, t = shares(path, eps, args.match, args.per_tensor)
        columns[run] = (col, t, eps)
    if args.json:
        for run, (col, t, eps) in columns.items():
            print(json.dumps({"run": run, "step": t, "eps": eps,
                              "weights": {r: {"entries": n, "below_eps": b / n, "median_sqrt_v_over_eps": m}
                                          for r, (n, b, m) in col.items()}}))
        return
    names = []
    for col, _, _ in columns.values():
        names += [r for r in col if r not in names]
    head = " | ".join(f"{os.path.basename(os.path.normpath(r))} (ε {eps:g}, step {t}): √v̂<ε | median √v̂/ε"
                      for r, (_, t, eps) in columns.items())
    print(f"| weight | {head} |")
    print("| --- |" + " ---: | ---: |" * len(columns))
    for r in names:
        cells = []
        for col, _, _ in columns.values():
            cells += [f"{col[r][1] / col[r][0]:.2f}", f"{col[r][2]:.3g}"] if r in col else ["—", "—"]
        print(f"| {r} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
