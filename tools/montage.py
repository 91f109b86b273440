#!/usr/bin/python3
"""tools/montage.py: lay PNGs written by apps/inspect_init --png out on one labelled grid.

    /usr/bin/python3 tools/montage.py -o attention.png \\
        --rows timm mimetic impulse3 --cols init trained --pictures attn_layer00 attn_layer05 \\
        --pattern 'pics/{row}-{col}/{picture}.png'

One row per --rows entry; one column per (--cols entry, --pictures entry) pair, titled
"col: picture". The pattern names each file. A missing file leaves its cell blank with a note,
so a partial set of runs still draws. Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", nargs="+", required=True)
    ap.add_argument("--cols", nargs="+", required=True)
    ap.add_argument("--pictures", nargs="+", required=True)
    ap.add_argument("--pattern", required=True, help="path with {row}, {col} and {picture}")
    ap.add_argument("-o", "--output", default="montage.png")
    ap.add_argument("--title", default="")
    args = ap.parse_args()

    cells = [(c, p) for c in args.cols for p in args.pictures]
    fig, axes = plt.subplots(len(args.rows), len(cells), figsize=(2.6 * len(cells), 2.6 * len(args.rows)),
                             squeeze=False)
    for i, row in enumerate(args.rows):
        for j, (col, picture) in enumerate(cells):
            ax = axes[i][j]
            ax.set_xticks([])
            ax.set_yticks([])
            path = args.pattern.format(row=row, col=col, picture=picture)
            if os.path.exists(path):
                ax.imshow(mpimg.imread(path), interpolation="nearest")
            else:
                ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
            if i == 0:
                ax.set_title(f"{col}: {picture}", fontsize=9)
            if j == 0:
                ax.set_ylabel(row, fontsize=11)
    if args.title:
        fig.suptitle(args.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(args.output, dpi=80)
    print(f"montage.py: wrote {args.output}")


if __name__ == "__main__":
    main()
