#!/usr/bin/python3
"""tools/mimetic_stats.py: reference statistics of mimetic initialization, computed with PyTorch.

An independent implementation (torch.linalg.svd in float64) of the formulas in init/mimetic.h:
per head A1 = a1*Z + b1*I, W_q W_k^T = the rank-k truncation of A1; per layer W_v W_proj =
a2*Z - b2*I, Z ~ N(0, 1/d). It prints, per (width, heads), the mean over layers of
  qk_diag_mean   mean of the diagonal of sum_h W_q^h W_k^hT
  qk_offdiag_rms rms of its off-diagonal entries
  vo_diag_mean, vo_offdiag_rms   the same for W_v W_proj
with the std across layers. tests/test_init_mimetic.cpp compares the engine's mimetic init
against these numbers (ViT-Tiny: d = 192, 3 heads).

  /usr/bin/python3 tools/mimetic_stats.py [--layers 200] [--seed 0]
"""
import argparse

import torch


def layer_stats(d, heads, a1=0.7, b1=0.7, a2=0.4, b2=0.4, uniform=False):
    k = d // heads
    eye = torch.eye(d, dtype=torch.float64)

    def noise():
        if uniform:
            return (torch.rand(d, d, dtype=torch.float64) * 2 - 1) * (3.0 / d) ** 0.5
        return torch.randn(d, d, dtype=torch.float64) / d ** 0.5

    qk = torch.zeros(d, d, dtype=torch.float64)
    for _ in range(heads):
        u, s, vh = torch.linalg.svd(a1 * noise() + b1 * eye)
        qk += u[:, :k] @ torch.diag(s[:k]) @ vh[:k]
    vo = a2 * noise() - b2 * eye
    out = []
    for m in (qk, vo):
        off = m - torch.diag(torch.diag(m))
        out += [m.diag().mean().item(), (off.pow(2).sum() / (d * d - d)).sqrt().item()]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=200, help="layers drawn per configuration (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed (default 0)")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    names = ["qk_diag_mean", "qk_offdiag_rms", "vo_diag_mean", "vo_offdiag_rms"]
    for d, heads in [(192, 3), (192, 6), (384, 6), (48, 3), (64, 1)]:
        rows = torch.tensor([layer_stats(d, heads) for _ in range(args.layers)])
        mean, std = rows.mean(0), rows.std(0)
        cells = ", ".join(f"{n} {m:.4f} ± {s:.4f}" for n, m, s in zip(names, mean.tolist(), std.tolist()))
        print(f"d={d} heads={heads}: {cells}  (mean ± std over {args.layers} layers)")


if __name__ == "__main__":
    main()
