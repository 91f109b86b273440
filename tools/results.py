#!/usr/bin/python3
"""tools/results.py: the tables of docs/RESULTS.md, made from run directories.

    /usr/bin/python3 tools/results.py runs/vit            # one markdown table for the runs in runs/vit
    /usr/bin/python3 tools/results.py runs/vit --copy docs/results/vit

Every subdirectory of the given folder that holds a config.json is a run (apps/train_vit or
apps/train_lm --out). Runs whose names differ only in a trailing "-sN" are seeds of one row: the
row shows each seed's final number, their mean and their spread (max − min). A run that has no
result.json did not finish (stopped on NaN, interrupted, still running): its row says so, with
the last training loss it logged. Wall time is result.json's "finished" minus config.json's
"started" (for a resumed run, its last part's start). Runs made with --eval-init add a column "at
init": each seed's score before its first step. --copy keeps the small files of each run (config.json, metrics.jsonl, result.json),
not the checkpoints, so the curves can be redrawn with tools/plot.py from the repository.
"""
import argparse
import json
import math
import os
import re
import shutil
from collections import Counter
from datetime import datetime


def read_json(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise SystemExit(f"results.py: {path} is not JSON ({e}); move that run away or repair the file")


def read_metrics(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise SystemExit(f"results.py: {path}:{n} is not JSON ({e})")
    return rows


def seconds_between(start, end):
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    return (datetime.strptime(end, fmt) - datetime.strptime(start, fmt)).total_seconds()


# What a run's final number is, by app and metric: (key in result.json, label, format, scale).
def final_metric(result):
    for key, label, scale in (("test_acc", "test acc %", 100), ("test_bpc", "test bpc", 1),
                              ("test_ppl", "test ppl", 1)):
        if key in result:
            return key, label, result[key] * scale
    raise SystemExit(f"results.py: no test metric in {sorted(result)}")


def score(figures, prefix=""):
    """A run's figure in the table's units: test accuracy in % (image runs) or validation bpc / ppl
    (LMs), the keys read with `prefix` ("best_": the best evaluation); None without one."""
    if prefix + "test_acc" in figures:
        return 100 * figures[prefix + "test_acc"]
    for key in ("valid_bpc", "valid_ppl"):
        if prefix + key in figures:
            return figures[prefix + key]
    return None


def best_eval(result):
    """The best evaluation of the run: best test accuracy (image runs) or best valid bpc / ppl."""
    return score(result, "best_")


def init_score(result):
    """The run's score before its first step (--eval-init's result.json init_eval); None without one."""
    return score(result.get("init_eval") or {})


def describe(config):
    """The flags that set a run apart: --init and the scheme/model options away from defaults."""
    # Where and how a run was started is not what sets it apart (--auto-resume continues a run as
    # --resume does; a table of runs made with and without it is one table).
    skip = {"--out", "--seed", "--data-dir", "--threads", "--resume", "--overwrite", "--auto-resume", "started", "app",
            "git_commit", "device", "threads", "resumed"}
    return {k: v for k, v in config.items() if k not in skip}


def flags_text(flags):
    # A switch that was not given is stored as "" (left out); one that was, as its CLI value.
    return " ".join(k if v in ("true", "false", True, False) else f"{k} {v}" for k, v in flags.items() if v != "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder")
    ap.add_argument("--copy", help="copy config.json, metrics.jsonl and result.json of every run here")
    args = ap.parse_args()

    runs = sorted(d for d in os.listdir(args.folder) if os.path.exists(os.path.join(args.folder, d, "config.json")))
    if not runs:
        raise SystemExit(f"results.py: no run directories (with config.json) in {args.folder}")
    rows = {}  # row name -> list of (seed, run dir)
    for name in runs:
        m = re.match(r"^(.*)-s(\d+)$", name)
        row, seed = (m.group(1), int(m.group(2))) if m else (name, None)
        rows.setdefault(row, []).append((seed, name))

    # The table's shared flags: each flag at its most common value across the runs that have it,
    # (runs made by an older binary lack the newer flags: a missing flag does not count). A row
    # then lists only where it differs from that.
    configs = {name: read_json(os.path.join(args.folder, name, "config.json")) for name in runs}
    counts = {}
    for c in configs.values():
        for k, v in describe(c).items():
            counts.setdefault(k, Counter())[json.dumps(v)] += 1
    # A value shared by no more than half the runs that have the flag is no table default: the rows
    # then show it.
    shared = {k: json.loads(c.most_common(1)[0][0]) for k, c in counts.items()
              if k != "--init" and 2 * c.most_common(1)[0][1] > sum(c.values())}  # every row names its init

    # The metric's name, from the finished runs (the table's first row may not have finished): one
    # table holds runs of one metric.
    label = None
    for name in runs:
        result = read_json(os.path.join(args.folder, name, "result.json"))
        if result is not None:
            this = final_metric(result)[1]
            if label is not None and this != label:
                raise SystemExit(f"results.py: {name} reports {this}, other runs {label}: "
                                 "one table holds runs of one metric")
            label = this
    label = label or "result"
    # train_lm's evaluations log the last block's tok_cos (1.00: a collapsed stack); the table gets
    # a column for it when any run has one, the value of each seed's last evaluation.
    def last_tok_cos(name):
        evals = [r for r in read_metrics(os.path.join(args.folder, name, "metrics.jsonl"))
                 if r.get("kind") == "eval" and "tok_cos" in r]
        return evals[-1]["tok_cos"] if evals else None
    tok_cos = {name: last_tok_cos(name) for name in runs}
    with_tok_cos = any(v is not None for v in tok_cos.values())
    # Runs made with --eval-init: a column for the score at init (test acc %, or valid bpc / ppl).
    results = {name: read_json(os.path.join(args.folder, name, "result.json")) for name in runs}
    at_init = {name: init_score(r) if r else None for name, r in results.items()}
    with_init = any(v is not None for v in at_init.values())

    header_done = False
    lines = []
    for row, members in rows.items():
        finals, walls, bests, notes, coses, inits = [], [], [], [], [], []
        # A name without "-sN" is seed 0 (the apps' default seed), so it comes first.
        for seed, name in sorted(members, key=lambda x: x[0] or 0):
            path = os.path.join(args.folder, name)
            result = results[name]
            config = configs[name]
            if result is None:
                train = [r for r in read_metrics(os.path.join(path, "metrics.jsonl")) if r.get("kind") == "train"]
                last = f"step {train[-1]['step']}, loss {train[-1]['loss']:.3g}" if train else "no step logged"
                notes.append(f"{'seed ' + str(seed) if seed is not None else 'run'}: did not finish ({last})")
                continue
            value = final_metric(result)[2]
            finals.append(value)
            bests.append(best_eval(result))
            # A resumed run's config.json keeps its first start and lists the parts: the wall time
            # is its last part's (how long the first ones ran is not recorded).
            parts = config.get("resumed") or []
            walls.append(seconds_between(parts[-1]["started"] if parts else config["started"], result["finished"]))
            if parts:
                notes.append(f"{'seed ' + str(seed) if seed is not None else 'run'}: resumed, wall of its last part")
            if tok_cos[name] is not None:
                coses.append(tok_cos[name])
            if at_init[name] is not None:
                inits.append(at_init[name])
        if not header_done:
            extra = (" at init |" if with_init else "") + (" last tok_cos |" if with_tok_cos else "")
            lines.append(f"| run | flags beyond the shared ones | {label} per seed | mean | spread | "
                         f"best eval | wall (min) |{extra}")
            lines.append("| --- | --- | --- | --- | --- | --- | --- |" + " --- |" * (with_init + with_tok_cos))
            header_done = True
        own = describe(configs[members[0][1]])
        differs = {k: v for k, v in own.items() if k == "--init" or shared.get(k) != v}
        # A switch the shared flags turn on, or a value they give, that this row leaves out has no
        # spelling of its own.
        off = [f"(no {k})" for k, v in differs.items() if v == "" and shared.get(k) not in (None, "", "false", False)]
        flags = " ".join([flags_text(differs)] + off).strip()
        per_seed = ", ".join(f"{v:.2f}" for v in finals) or "—"
        mean = f"{sum(finals) / len(finals):.2f}" if finals else "—"
        spread = f"{max(finals) - min(finals):.2f}" if len(finals) > 1 else "—"
        valid = ", ".join(f"{b:.2f}" for b in bests if b is not None and math.isfinite(b)) or "—"
        wall = ", ".join(f"{w / 60:.1f}" for w in walls) or "—"
        note = ("; " + "; ".join(notes)) if notes else ""
        init = (" " + (", ".join(f"{v:.2f}" for v in inits) or "—") + " |") if with_init else ""
        cos = (" " + (", ".join(f"{c:.2f}" for c in coses) or "—") + " |") if with_tok_cos else ""
        lines.append(f"| {row} | {flags or '—'} | {per_seed}{note} | {mean} | {spread} | {valid} | {wall} |{init}{cos}")
    lines.append("")
    lines.append("Shared flags: `" + flags_text(shared) + "`")
    # Resumed runs: every part's commit and start.
    parts = list(configs.values()) + [p for c in configs.values() for p in (c.get("resumed") or [])]
    commits = sorted({c.get("git_commit", "?")[:7] for c in parts})
    starts = sorted(c.get("started", "?") for c in parts)
    lines.append(f"Commits: {', '.join(commits)}; started {starts[0]} to {starts[-1]}.")
    print("\n".join(lines))

    if args.copy:
        for name in runs:
            dest = os.path.join(args.copy, name)
            os.makedirs(dest, exist_ok=True)
            for f in ("config.json", "metrics.jsonl", "result.json"):
                src = os.path.join(args.folder, name, f)
                if os.path.exists(src):
                    shutil.copyfile(src, os.path.join(dest, f))


if __name__ == "__main__":
    main()
