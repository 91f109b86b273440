#!/usr/bin/env python3
"""tools/kernel_table.py: Nsight Compute's per-launch CSV (ncu --csv --page raw --print-units base
--metrics gpu__time_duration.sum,dram__bytes.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed)
summed per kernel, as a markdown table: calls, total and mean time, share of the profiled time,
DRAM bytes and bandwidth, and the time-weighted SM throughput (% of peak). tools/device_check.sh
runs it on one training step, so a GPU call returns where the step's time goes kernel by kernel.

    python3 tools/kernel_table.py kernels.csv [--top 40] > kernels.md

Rows whose metrics are not numbers (ncu's units row, messages) are skipped; a file with no launch
row is an error that names it.
"""
import argparse
import csv
import sys
from collections import defaultdict

TIME, BYTES, SM = "gpu__time_duration.sum", "dram__bytes.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def read_launches(path):
    """(kernel name, ns, bytes or None, sm % or None) for each launch in the CSV."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own messages start with ==
    rows = list(csv.reader(lines))
    header = next((i for i, r in enumerate(rows) if "Kernel Name" in r and TIME in r), None)
    if header is None:
        sys.exit(f"tools/kernel_table.py: {path}: no header with 'Kernel Name' and {TIME}")
    cols = rows[header]
    name, t = cols.index("Kernel Name"), cols.index(TIME)
    b = cols.index(BYTES) if BYTES in cols else None
    s = cols.index(SM) if SM in cols else None
    out = []
    for r in rows[header + 1:]:
        if len(r) != len(cols) or number(r[t]) is None:
            continue
        out.append((r[name], number(r[t]), number(r[b]) if b is not None else None,
                    number(r[s]) if s is not None else None))
    if not out:
        sys.exit(f"tools/kernel_table.py: {path}: no launch rows")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40, help="kernels listed (the rest summed in one row)")
    args = ap.parse_args()
    launches = read_launches(args.csv)
    calls, ns, nbytes, sm_ns = defaultdict(int), defaultdict(float), defaultdict(float), defaultdict(float)
    for k, t, b, s in launches:
        calls[k] += 1
        ns[k] += t
        nbytes[k] += b or 0.0
        sm_ns[k] += (s or 0.0) * t
    total = sum(ns.values())
    order = sorted(ns, key=ns.get, reverse=True)
    print(f"{len(launches)} launches of {len(order)} kernels, {total / 1e6:.3f} ms of kernel time in all.\n")
    print("| kernel | calls | ms | µs / call | share | DRAM MB | TB/s | SM % of peak |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")

    def row(label, ks):
        n, t, b = sum(calls[k] for k in ks), sum(ns[k] for k in ks), sum(nbytes[k] for k in ks)
        sm = sum(sm_ns[k] for k in ks) / t if t > 0 else 0.0
        bw = b / t / 1e3 if t > 0 else 0.0  # bytes per ns = GB/s; / 1e3 = TB/s
        short = label if len(label) <= 90 else label[:87] + "..."
        print(f"| `{short}` | {n} | {t / 1e6:.3f} | {t / n / 1e3:.1f} | {100 * t / total:.1f}% | {b / 1e6:.1f} | "
              f"{bw:.2f} | {sm:.0f} |")

    for k in order[:args.top]:
        row(k, [k])
    if len(order) > args.top:
        row(f"({len(order) - args.top} other kernels)", order[args.top:])


if __name__ == "__main__":
    main()
