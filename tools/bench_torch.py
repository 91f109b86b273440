#!/usr/bin/python3
"""tools/bench_torch.py: the PyTorch twin of apps/bench, for same-machine speed comparisons.

Builds the same models (ViT: conv patch embedding, class token, sin-cos PE, Pre-LN blocks with
separate q/k/v/proj, GELU MLP; causal TransformerLM with tied weights) and times full training
steps (forward, backward, AdamW) the same way: median over --steps timed steps after --warmup.
Prints one JSON line with the same fields as apps/bench.

    /usr/bin/python3 tools/bench_torch.py vit --dim 192 --depth 6 --heads 3 --patch 4 --batch 64 --steps 5
    python3 tools/bench_torch.py lm --device cuda --mode compile --precision tf32   # on a GPU machine

--device cuda synchronizes at the end of each timed step (as apps/bench does) and reports the
peak of torch.cuda.max_memory_allocated; --mode compile wraps the model in torch.compile (PyTorch
2.x; its compilation happens in the warm-up steps); --precision tf32 allows TF32 matmuls, bf16
runs the forward under autocast(bfloat16) with fp32 master weights.
"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as tnn
import torch.nn.functional as F


class Attention(tnn.Module):
    def __init__(self, dim, heads, causal):
        super().__init__()
        self.q, self.k, self.v, self.proj = (tnn.Linear(dim, dim) for _ in range(4))
        self.heads, self.causal = heads, causal

    def forward(self, x):
        B, T, D = x.shape
        split = lambda t: t.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        s = q @ k.transpose(-1, -2) / math.sqrt(D // self.heads)
        if self.causal:
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        return self.proj(o)


class Block(tnn.Module):
    def __init__(self, dim, heads, causal):
        super().__init__()
        self.norm1, self.norm2 = tnn.LayerNorm(dim), tnn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal)
        self.mlp = tnn.Sequential(tnn.Linear(dim, 4 * dim), tnn.GELU(), tnn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(tnn.Module):
    def __init__(self, dim, depth, heads, patch, image, classes=10):
        super().__init__()
        self.patch_embed = tnn.Conv2d(3, dim, patch, patch)
        self.cls_token = tnn.Parameter(torch.zeros(1, 1, dim))
        n = (image // patch) ** 2
        self.register_buffer("pos_embed", torch.randn(1, n + 1, dim) * 0.02)  # values do not matter for speed
        self.blocks = tnn.ModuleList(Block(dim, heads, False) for _ in range(depth))
        self.norm, self.head = tnn.LayerNorm(dim), tnn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x)[:, 0])


class LM(tnn.Module):
    def __init__(self, vocab, dim, depth, heads, seq):
        super().__init__()
        self.tok_emb = tnn.Embedding(vocab, dim)
        self.register_buffer("pos_embed", torch.randn(seq, dim) * 0.02)
        self.blocks = tnn.ModuleList(Block(dim, heads, True) for _ in range(depth))
        self.norm = tnn.LayerNorm(dim)

    def forward(self, ids):
        x = self.tok_emb(ids) + self.pos_embed[: ids.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.norm(x) @ self.tok_emb.weight.t()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=["vit", "lm"], nargs="?", default="vit")
    ap.add_argument("--dim", type=int, default=192)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--patch", type=int, default=4)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    a = ap.parse_args()
    dev = torch.device(a.device)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.model == "vit":
        net = ViT(a.dim, a.depth, a.heads, a.patch, a.image_size).to(dev)
        x = torch.randn(a.batch, 3, a.image_size, a.image_size, device=dev)
        y = torch.randint(0, 10, (a.batch,), device=dev)
        items = a.batch
    else:
        net = LM(a.vocab, a.dim, a.depth, a.heads, a.seq).to(dev)
        x = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
        y = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
        items = a.batch * a.seq
    model = torch.compile(net) if a.mode == "compile" else net

    def loss_fn():
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            out = model(x)
        return F.cross_entropy(out.float().flatten(0, -2) if a.model == "lm" else out.float(), y.flatten())

    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, weight_decay=0.05)
    times = []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        if a.device == "cuda":
            torch.cuda.synchronize()
        if s >= a.warmup:
            times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    ms = times[len(times) // 2]
    out = {"model": a.model, "dim": a.dim, "depth": a.depth, "batch": a.batch,
           "params": sum(p.numel() for p in net.parameters()), "threads": torch.get_num_threads(),
           "ms_per_step": ms, "items_per_s": items / (ms / 1000),
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "framework": f"torch {torch.__version__}", "device": a.device, "mode": a.mode,
           "precision": a.precision}
    if a.device == "cuda":
        out["device"] = "cuda: " + torch.cuda.get_device_name()
        out["peak_device_mb"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(out))


if __name__ == "__main__":
    main()
