#!/usr/bin/python3
"""tools/bench_torch.py: the PyTorch twin of apps/bench, for same-machine speed comparisons.

Builds the same five models as apps/bench, with the same shapes and parameter counts (the JSON
line's "params" is to be compared with apps/bench's), and times full training steps (forward,
backward, AdamW) the same way: median over --steps timed steps after --warmup untimed ones.

  vit   conv patch embedding, class token, fixed position embedding (a buffer), Pre-LN blocks with
        separate q/k/v/proj and a GELU MLP (4x), final LayerNorm, linear head (10 classes)
  lm    causal TransformerLM: token embedding + fixed sinusoidal positions, the same Pre-LN blocks,
        final LayerNorm, output tied to the embedding
  gau   GAU language model (nn/gau.cpp): Post-Norm stack x <- LN(x + GAU(x)), expansion e = 2*dim,
        s = 128, RoPE on q and k, relu^2 attention, output tied to the embedding (--heads unused)
  lstm  Zaremba-style LSTM LM (nn/lstm.cpp): embedding, torch.nn.LSTM with --depth layers of
        --dim units, untied linear head; the state is carried from step to step, detached
  convmixer  ConvMixer (nn/convmixer.cpp): patch conv (kernel = stride = --patch), GELU, BatchNorm,
        --depth blocks of [depthwise --kernel conv, GELU, BatchNorm, residual; 1x1 conv, GELU,
        BatchNorm], global average pooling, linear head (10 classes)

Attention uses torch.nn.functional.scaled_dot_product_attention where the running PyTorch has it
(2.x), as PyTorch users would, and the explicit softmax(QK^T/sqrt(d))V on 1.13 (--attention).

    /usr/bin/python3 tools/bench_torch.py vit --dim 192 --depth 6 --heads 3 --patch 4 --batch 64 --steps 5
    .venv/bin/python tools/bench_torch.py lm --dim 256 --depth 4 --heads 4 --batch 16 --mode compile
    python3 tools/bench_torch.py lm --device cuda --mode compile --precision tf32   # on a GPU machine

Prints one JSON line with the fields of apps/bench (ms_per_step, items_per_s, peak_rss_mb from
getrusage, params, threads) plus framework, torch, mode, attention, precision, and
import_rss_mb: the peak RSS before the model is built (interpreter and libraries), to subtract.
--threads N sets torch.set_num_threads(N) (0: PyTorch's default). --device cuda synchronizes at
the end of each timed step (as apps/bench does) and reports torch.cuda.max_memory_allocated.
--precision tf32 allows TF32 matmuls (CUDA), bf16 runs the forward under autocast(bfloat16)
with fp32 master weights.

--mode compile wraps the model in torch.compile (PyTorch 2.x, default inductor backend, which on
the CPU generates and compiles C++). Compilation is SLOW (tens of seconds to minutes on a small
CPU); it happens in the warm-up steps (at least one is run), which are excluded from the timing,
and their total time is reported as warmup_s. peak_rss_mb then includes the compiler's memory.
Dynamo does not trace torch.nn.LSTM by default (a graph break): under compile the lstm model's
LSTM runs eagerly and only its embedding, head and loss are compiled, as a PyTorch user gets.
"""
import argparse
import json
import math
import resource
import sys
import time

import torch
import torch.nn as tnn
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")  # PyTorch >= 2.0


class Attention(tnn.Module):
    def __init__(self, dim, heads, causal, use_sdpa, max_len):
        super().__init__()
        self.q, self.k, self.v, self.proj = (tnn.Linear(dim, dim) for _ in range(4))
        self.heads, self.causal, self.use_sdpa = heads, causal, use_sdpa
        if causal and not use_sdpa:
            self.register_buffer("mask", torch.ones(max_len, max_len, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, x):
        B, T, D = x.shape
        split = lambda t: t.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        if self.use_sdpa:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            s = q @ k.transpose(-1, -2) / math.sqrt(D // self.heads)
            if self.causal:
                s = s.masked_fill(self.mask[:T, :T], float("-inf"))
            o = s.softmax(-1) @ v
        return self.proj(o.transpose(1, 2).reshape(B, T, D))


class Block(tnn.Module):
    def __init__(self, dim, heads, causal, use_sdpa, max_len=0):
        super().__init__()
        self.norm1, self.norm2 = tnn.LayerNorm(dim), tnn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal, use_sdpa, max_len)
        self.mlp = tnn.Sequential(tnn.Linear(dim, 4 * dim), tnn.GELU(), tnn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(tnn.Module):
    def __init__(self, dim, depth, heads, patch, image, use_sdpa, classes=10):
        super().__init__()
        self.patch_embed = tnn.Conv2d(3, dim, patch, patch)
        self.cls_token = tnn.Parameter(torch.zeros(1, 1, dim))
        n = (image // patch) ** 2
        self.register_buffer("pos_embed", torch.randn(1, n + 1, dim) * 0.02)  # values do not matter for speed
        self.blocks = tnn.ModuleList(Block(dim, heads, False, use_sdpa) for _ in range(depth))
        self.norm, self.head = tnn.LayerNorm(dim), tnn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x)[:, 0])


class LM(tnn.Module):
    def __init__(self, vocab, dim, depth, heads, seq, use_sdpa):
        super().__init__()
        self.tok_emb = tnn.Embedding(vocab, dim)
        self.register_buffer("pos_embed", torch.randn(seq, dim) * 0.02)
        self.blocks = tnn.ModuleList(Block(dim, heads, True, use_sdpa, seq) for _ in range(depth))
        self.norm = tnn.LayerNorm(dim)

    def forward(self, ids):
        x = self.tok_emb(ids) + self.pos_embed[: ids.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.norm(x) @ self.tok_emb.weight.t()


class GAU(tnn.Module):
    """[U|V|Z] = silu(xW+b); Q, K = per-dim affine of Z, then RoPE; A = relu^2(QK^T)/(n s), causal
    (zeros above the diagonal); out = (U * AV) W_o. One head, as nn/gau.cpp."""

    def __init__(self, dim, e, s):
        super().__init__()
        self.e, self.s = e, s
        self.hidden = tnn.Linear(dim, 2 * e + s)
        self.out = tnn.Linear(e, dim)
        self.gamma_q, self.beta_q = tnn.Parameter(torch.ones(s)), tnn.Parameter(torch.zeros(s))
        self.gamma_k, self.beta_k = tnn.Parameter(torch.ones(s)), tnn.Parameter(torch.zeros(s))

    def forward(self, x, cos, sin, mask):
        n = x.shape[1]
        u, v, z = F.silu(self.hidden(x)).split([self.e, self.e, self.s], -1)
        q = rope(z * self.gamma_q + self.beta_q, cos[:n], sin[:n])
        k = rope(z * self.gamma_k + self.beta_k, cos[:n], sin[:n])
        scores = (q @ k.transpose(-1, -2)).masked_fill(mask[:n, :n], 0.0)
        a = F.relu(scores).square() / (n * self.s)
        return self.out(u * (a @ v))


def rope(x, cos, sin):
    """Rotary embedding, rotate-half layout (pairs (i, i + D/2)), as engine/ops rope."""
    x1, x2 = x.chunk(2, -1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


class GAULM(tnn.Module):
    def __init__(self, vocab, dim, depth, seq, s=128):
        super().__init__()
        self.tok_emb = tnn.Embedding(vocab, dim)
        self.layers = tnn.ModuleList(GAU(dim, 2 * dim, s) for _ in range(depth))
        self.norms = tnn.ModuleList(tnn.LayerNorm(dim) for _ in range(depth))
        angle = torch.arange(seq, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(0, s, 2) / s)
        self.register_buffer("cos", angle.cos().float(), persistent=False)
        self.register_buffer("sin", angle.sin().float(), persistent=False)
        self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, ids):
        x = self.tok_emb(ids)
        for layer, norm in zip(self.layers, self.norms):  # Post-Norm, no final norm (GAUConfig's default)
            x = norm(x + layer(x, self.cos, self.sin, self.mask))
        return x @ self.tok_emb.weight.t()


class ConvMixer(tnn.Module):
    def __init__(self, dim, depth, kernel, patch, classes=10):
        super().__init__()
        self.stem = tnn.Sequential(tnn.Conv2d(3, dim, patch, stride=patch), tnn.GELU(), tnn.BatchNorm2d(dim))
        self.spatial = tnn.ModuleList(
            tnn.Sequential(tnn.Conv2d(dim, dim, kernel, groups=dim, padding=kernel // 2), tnn.GELU(), tnn.BatchNorm2d(dim))
            for _ in range(depth))
        self.pointwise = tnn.ModuleList(
            tnn.Sequential(tnn.Conv2d(dim, dim, 1), tnn.GELU(), tnn.BatchNorm2d(dim)) for _ in range(depth))
        self.head = tnn.Linear(dim, classes)

    def forward(self, x):
        x = self.stem(x)
        for spatial, pointwise in zip(self.spatial, self.pointwise):
            x = pointwise(x + spatial(x))
        return self.head(x.mean(dim=(2, 3)))


class LSTMLM(tnn.Module):
    def __init__(self, vocab, hidden, layers):
        super().__init__()
        self.tok_emb = tnn.Embedding(vocab, hidden)
        self.lstm = tnn.LSTM(hidden, hidden, layers, batch_first=True)
        self.head = tnn.Linear(hidden, vocab)

    def forward(self, ids, state):
        y, state = self.lstm(self.tok_emb(ids), state)
        return self.head(y), state


def main():
    # What the process holds before any model exists (the interpreter and PyTorch's libraries;
    # a wheel built with CUDA maps its CUDA libraries even on the CPU).
    import_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=["vit", "lm", "gau", "lstm", "convmixer"], nargs="?", default="vit")
    ap.add_argument("--dim", type=int, default=192, help="model width (default %(default)s)")
    ap.add_argument("--depth", type=int, default=6, help="blocks, layers for lstm (default %(default)s)")
    ap.add_argument("--heads", type=int, default=3, help="attention heads, vit and lm (default %(default)s)")
    ap.add_argument("--patch", type=int, default=4, help="ViT patch size (default %(default)s)")
    ap.add_argument("--image-size", type=int, default=32, help="ViT / ConvMixer image size (default %(default)s)")
    ap.add_argument("--kernel", type=int, default=9, help="ConvMixer depthwise kernel (default %(default)s)")
    ap.add_argument("--batch", type=int, default=64, help="batch size (default %(default)s)")
    ap.add_argument("--seq", type=int, default=128, help="sequence length, language models (default %(default)s)")
    ap.add_argument("--vocab", type=int, default=10000, help="vocabulary, language models (default %(default)s)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (default %(default)s)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads; 0: PyTorch's default")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager",
                    help="compile: torch.compile, inductor (slow to compile; warm-up excluded)")
    ap.add_argument("--attention", choices=["auto", "sdpa", "math"], default="auto",
                    help="auto: scaled_dot_product_attention where PyTorch has it, else math (explicit softmax)")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.steps < 1:
        ap.error("--steps must be at least 1")
    if a.mode == "compile":
        if not hasattr(torch, "compile"):
            sys.exit(f"bench_torch.py: --mode compile needs PyTorch 2.x (this is {torch.__version__})")
        a.warmup = max(a.warmup, 1)  # compilation happens in the first step: never time it
    if a.attention == "sdpa" and not HAS_SDPA:
        sys.exit(f"bench_torch.py: --attention sdpa needs PyTorch 2.x (this is {torch.__version__})")
    use_sdpa = HAS_SDPA if a.attention == "auto" else a.attention == "sdpa"
    dev = torch.device(a.device)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    state = None
    images = a.model in ("vit", "convmixer")
    if images:
        if a.model == "vit":
            net = ViT(a.dim, a.depth, a.heads, a.patch, a.image_size, use_sdpa)
        else:
            net = ConvMixer(a.dim, a.depth, a.kernel, a.patch)
        x = torch.randn(a.batch, 3, a.image_size, a.image_size)
        y = torch.randint(0, 10, (a.batch,))
        items = a.batch
    else:
        x = torch.randint(0, a.vocab, (a.batch, a.seq))
        y = torch.randint(0, a.vocab, (a.batch, a.seq))
        items = a.batch * a.seq
        if a.model == "lm":
            net = LM(a.vocab, a.dim, a.depth, a.heads, a.seq, use_sdpa)
        elif a.model == "gau":
            net = GAULM(a.vocab, a.dim, a.depth, a.seq)
        else:
            net = LSTMLM(a.vocab, a.dim, a.depth)
            # Zeros to start, as apps/bench; a fixed input signature from the first step on.
            state = tuple(torch.zeros(a.depth, a.batch, a.dim, device=dev) for _ in range(2))
    net, x, y = net.to(dev), x.to(dev), y.to(dev)
    model = torch.compile(net) if a.mode == "compile" else net

    def loss_fn():
        nonlocal state
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            if a.model == "lstm":
                out, new_state = model(x, state)
                state = tuple(s.detach() for s in new_state)  # truncated BPTT, as LSTMLM::detach
            else:
                out = model(x)
        return F.cross_entropy(out.float() if images else out.float().flatten(0, -2), y.flatten())

    # AdamW as apps/bench's Adam(param_groups(net, 0.05)) (nn/optim.cpp): weight decay on
    # matrices and kernels, not on vectors (biases, norms), embedding tables or the class token.
    tables = {id(m.weight) for m in net.modules() if isinstance(m, tnn.Embedding)}
    skip = lambda n, p: p.ndim <= 1 or id(p) in tables or "cls_token" in n or "pos_embed" in n
    decay = [p for n, p in net.named_parameters() if not skip(n, p)]
    no_decay = [p for n, p in net.named_parameters() if skip(n, p)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4)
    times = []
    t_start = time.perf_counter()
    warmup_s = 0.0
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
        elif s == a.warmup - 1:
            warmup_s = time.perf_counter() - t_start
    times.sort()
    ms = times[len(times) // 2]
    out = {"model": a.model, "dim": a.dim, "depth": a.depth, "batch": a.batch,
           "params": sum(p.numel() for p in net.parameters()), "threads": torch.get_num_threads(),
           "device": a.device, "precision": a.precision,
           "ms_per_step": ms, "items_per_s": items / (ms / 1000),
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "framework": f"torch {torch.__version__}", "torch": torch.__version__, "mode": a.mode,
           "steps": a.steps, "warmup": a.warmup, "warmup_s": warmup_s, "import_rss_mb": import_rss_mb}
    if a.model in ("vit", "lm"):
        out["attention"] = "sdpa" if use_sdpa else "math"
    if a.model == "vit":
        out.update(heads=a.heads, patch=a.patch)
    elif a.model == "convmixer":
        out.update(kernel=a.kernel, patch=a.patch)
    else:
        out.update(seq=a.seq, vocab=a.vocab)
    if a.device == "cuda":
        out["device"] = "cuda: " + torch.cuda.get_device_name()
        out["peak_device_mb"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(out))


if __name__ == "__main__":
    main()
