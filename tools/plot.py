#!/usr/bin/python3
"""tools/plot.py: draw the training curves of one or several runs into one PNG, to compare inits.

    /usr/bin/python3 tools/plot.py runs/timm runs/mimetic -o compare.png

Each argument is a run directory written by apps/train_vit or apps/train_lm (--out). Left: the
training loss against the step (smoothed over --smooth points). Right: the evaluation metric
(test accuracy for train_vit; validation bpc or perplexity for train_lm) against the epoch, or,
with --eval-x, against the step and/or the wall time (one panel each; wall time is train_lm's
elapsed_s, minutes since the training loop started, so it includes the evaluations; train_vit does
not log it). All runs must have one metric (ViT runs with ViT runs, char-level with char-level).

    /usr/bin/python3 tools/plot.py runs/char/* --eval-x step time -o char.png
Runs are labelled by their --init (and the directory name). Needs matplotlib
(Debian: python3-matplotlib).
"""
import argparse
import json
import os

try:
    import matplotlib
except ImportError:
    raise SystemExit("plot.py: needs matplotlib (Debian: apt-get install python3-matplotlib)")

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_run(path):
    metrics_file = os.path.join(path, "metrics.jsonl")
    if not os.path.exists(metrics_file):
        raise SystemExit(f"plot.py: {metrics_file} not found (is {path} a run directory made with --out?)")
    config = {}
    if os.path.exists(os.path.join(path, "config.json")):
        with open(os.path.join(path, "config.json")) as f:
            try:
                config = json.load(f)
            except json.JSONDecodeError as e:
                raise SystemExit(f"plot.py: {os.path.join(path, 'config.json')} is not JSON ({e})")
    train, evals = [], []
    with open(metrics_file) as f:
        for n, line in enumerate(f, 1):
            try:
                m = json.loads(line)
            except json.JSONDecodeError:
                raise SystemExit(f"plot.py: {metrics_file}:{n} is not JSON")
            (train if m.get("kind") == "train" else evals).append(m)
    label = f"{config.get('--init', '?')} ({os.path.basename(os.path.normpath(path))})"
    return label, train, evals


def smooth(values, k):
    if k <= 1:
        return values
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= k:
            acc -= values[i - k]
        out.append(acc / min(i + 1, k))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="run directories")
    ap.add_argument("-o", "--output", default="curves.png", help="PNG to write (default: curves.png)")
    ap.add_argument("--smooth", type=int, default=20, help="moving average of the training loss (default: 20)")
    ap.add_argument("--eval-x", nargs="+", choices=("epoch", "step", "time"), default=["epoch"],
                    help="x axis (or axes, a panel each) of the evaluation curves (default: epoch)")
    ap.add_argument("--log-y", action="store_true", help="logarithmic y axis for the evaluation panels "
                    "(perplexities that start in the millions)")
    a = ap.parse_args()
    fig, axes = plt.subplots(1, 1 + len(a.eval_x), figsize=(6 * (1 + len(a.eval_x)), 4.5))
    left, rights = axes[0], axes[1:]
    xs = {"epoch": lambda m: m["epoch"], "step": lambda m: m["step"], "time": lambda m: m["elapsed_s"] / 60}
    xlabels = {"epoch": "epoch", "step": "step", "time": "wall time (min)"}
    metric_name = None
    for path in a.runs:
        label, train, evals = read_run(path)
        if train:
            left.plot([m["step"] for m in train], smooth([m["loss"] for m in train], a.smooth), label=label)
        if evals:
            keys = [k for k in ("test_acc", "valid_bpc", "valid_ppl") if k in evals[0]]
            if keys:
                if metric_name is not None and keys[0] != metric_name:
                    raise SystemExit(f"plot.py: {path} logs {keys[0]}, the runs before it {metric_name}: "
                                     "one plot compares runs of one metric")
                metric_name = keys[0]
                for x, right in zip(a.eval_x, rights):
                    if x == "time" and "elapsed_s" not in evals[0]:
                        raise SystemExit(f"plot.py: {path}'s metrics have no elapsed_s (train_lm logs it, since "
                                         "2026-11-25; train_vit does not)")
                    right.plot([xs[x](m) for m in evals], [m[metric_name] for m in evals], marker="o", label=label)
    left.set(xlabel="step", ylabel="training loss", title="training loss")
    for x, right in zip(a.eval_x, rights):
        right.set(xlabel=xlabels[x], ylabel=metric_name or "", title=metric_name or "no evaluations")
        if a.log_y:
            right.set_yscale("log")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.output, dpi=120)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
