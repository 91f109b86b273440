#!/usr/bin/python3
"""tools/golden.py: PyTorch reference values for the engine's golden tests (tests/test_golden.cpp).

Run with Debian's PyTorch (torch 1.13, CPU), from anywhere:

    /usr/bin/python3 tools/golden.py

For every case it writes tests/golden/<case>.safetensors holding
    the inputs            under their names ("x", "a", "weight", ...; index tensors as I32),
    "out"                 the op's output,
    "w"                   fixed random weights of the output's shape,
    "grad.<input>"        d(sum(out * w))/d(input) for every float input,
plus any extra tensors a case names (batch norm's updated running statistics), and metadata
{"op": the torch expression, "torch": version}. Everything is float32 on the CPU, as the engine.

Each case draws from its own generator seeded by the case name, so adding or editing a case
leaves every other file unchanged. The safetensors files are written by hand (json + struct):
torch 1.13 has no safetensors package. Only torch (and numpy through it) is needed.
"""
import json
import math
import pathlib
import struct
import zlib

import torch
import torch.nn.functional as F

OUT_DIR = pathlib.Path(__file__).resolve().parent.parent / "tests" / "golden"


def write_safetensors(path, tensors, metadata):
    """tensors: dict name -> float32/int32 CPU tensor, written in insertion order."""
    header = {"__metadata__": metadata}
    chunks, offset = [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        dtype = {torch.float32: "F32", torch.int32: "I32"}[t.dtype]
        data = t.numpy().astype("<f4" if dtype == "F32" else "<i4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data section 8-byte aligned
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)
    tmp.replace(path)


class Case:
    """One golden file: register inputs, then finish(out) runs the backward pass and writes it."""

    def __init__(self, name, op):
        self.name, self.op = name, op
        self.gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
        self.tensors = {}  # everything to save, in order
        self.grad_inputs = {}  # name -> leaf tensor whose gradient is saved

    # Random draws from this case's generator.
    def randn(self, *shape, scale=1.0):
        return torch.randn(shape, generator=self.gen) * scale

    def uniform(self, lo, hi, *shape):
        return torch.rand(shape, generator=self.gen) * (hi - lo) + lo

    def away_from_zero(self, *shape):
        """Magnitudes in [0.2, 2] with random signs: no input sits on a kink (relu, max ties)."""
        sign = torch.randint(0, 2, shape, generator=self.gen) * 2 - 1
        return self.uniform(0.2, 2.0, *shape) * sign

    def ints(self, lo, hi, *shape):
        return torch.randint(lo, hi, shape, generator=self.gen, dtype=torch.int64)

    # Registration.
    def input(self, name, value, grad=True):
        t = value.detach().float().clone().requires_grad_(grad)
        self.tensors[name] = t
        if grad:
            self.grad_inputs[name] = t
        return t

    def index(self, name, value):
        """An index tensor: saved as int32, returned as int64 for torch."""
        self.tensors[name] = value.to(torch.int32)
        return value.long()

    def finish(self, out, extra=None):
        w = self.randn(*out.shape)
        (out * w).sum().backward()
        self.tensors["out"] = out.detach()
        self.tensors["w"] = w
        for name, t in self.grad_inputs.items():
            assert t.grad is not None, f"{self.name}: no gradient reached {name}"
            self.tensors["grad." + name] = t.grad
        for name, t in (extra or {}).items():
            self.tensors[name] = t.detach().clone()
        meta = {"op": self.op, "torch": torch.__version__, "generated_by": "tools/golden.py"}
        write_safetensors(OUT_DIR / f"{self.name}.safetensors", self.tensors, meta)


# ---------------------------------------------------------------------------------------------
# Reference formulas for ops torch 1.13 lacks (or names differently), written out plainly.

def attention(q, k, v, causal, scale=None):
    """softmax(q kᵀ · scale + mask) v; mask = -inf above the diagonal when causal."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale
    if causal:
        tq, tk = scores.shape[-2:]
        scores = scores + torch.full((tq, tk), float("-inf")).triu(1)
    return torch.softmax(scores, dim=-1) @ v


def rope(x, base=10000.0, start_pos=0):
    """Rotary embedding, "rotate half" layout: pair (i, i + D/2) turns by angle t · base^(-2i/D)."""
    T, D = x.shape[-2:]
    half = D // 2
    inv_freq = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / D)
    t = torch.arange(start_pos, start_pos + T, dtype=torch.float64)
    angle = torch.outer(t, inv_freq)  # [T, D/2]; float64 so the reference angles are exact
    cos = torch.cat([angle.cos(), angle.cos()], -1).float()
    sin = torch.cat([angle.sin(), angle.sin()], -1).float()
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


# ---------------------------------------------------------------------------------------------
# Cases

def elementwise():
    for name, fn in [("add", torch.add), ("mul", torch.mul)]:
        c = Case(name, f"torch.{name}(a [3,1,5], b [4,5]) (broadcast)")
        c.finish(fn(c.input("a", c.randn(3, 1, 5)), c.input("b", c.randn(4, 5))))
    c = Case("div", "a [2,3,4] / b [3,1] (broadcast), |b| in [0.2, 2]")
    c.finish(c.input("a", c.randn(2, 3, 4)) / c.input("b", c.away_from_zero(3, 1)))

    unary = [
        ("exp", torch.exp, lambda c: c.randn(4, 6)),
        ("log", torch.log, lambda c: c.uniform(0.2, 3.0, 4, 6)),
        ("tanh", torch.tanh, lambda c: c.randn(4, 6, scale=1.5)),
        ("sigmoid", torch.sigmoid, lambda c: c.randn(4, 6, scale=2.0)),
        ("relu", torch.relu, lambda c: c.away_from_zero(4, 6)),
        ("gelu", lambda x: F.gelu(x), lambda c: c.randn(4, 6, scale=2.0)),
        ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), lambda c: c.randn(4, 6, scale=2.0)),
        ("silu", F.silu, lambda c: c.randn(4, 6, scale=2.0)),
    ]
    for name, fn, draw in unary:
        c = Case(name, f"{name}(x [4,6])")
        c.finish(fn(c.input("x", draw(c))))


def reduce():
    c = Case("sum_dim", "x [3,4,5].sum(dim=1)")
    c.finish(c.input("x", c.randn(3, 4, 5)).sum(dim=1))
    c = Case("mean_dim", "x [3,4,5].mean(dim=-1, keepdim=True)")
    c.finish(c.input("x", c.randn(3, 4, 5)).mean(dim=-1, keepdim=True))
    c = Case("max_dim", "x [3,4,5].max(dim=1).values (no ties)")
    c.finish(c.input("x", c.randn(3, 4, 5)).max(dim=1).values)


def matmul():
    def t(x):
        return x.transpose(-1, -2)

    c = Case("matmul", "a [5,3] @ b [3,4]")
    c.finish(c.input("a", c.randn(5, 3)) @ c.input("b", c.randn(3, 4)))
    c = Case("matmul_ta", "a [3,5]ᵀ @ b [3,4]")
    c.finish(t(c.input("a", c.randn(3, 5))) @ c.input("b", c.randn(3, 4)))
    c = Case("matmul_tb", "a [5,3] @ b [4,3]ᵀ")
    c.finish(c.input("a", c.randn(5, 3)) @ t(c.input("b", c.randn(4, 3))))
    c = Case("matmul_ta_tb", "a [3,5]ᵀ @ b [4,3]ᵀ")
    c.finish(t(c.input("a", c.randn(3, 5))) @ t(c.input("b", c.randn(4, 3))))
    c = Case("matmul_batched", "a [2,3,5,6] @ b [2,3,6,4]")
    c.finish(c.input("a", c.randn(2, 3, 5, 6)) @ c.input("b", c.randn(2, 3, 6, 4)))
    c = Case("matmul_batched_ta_tb", "a [2,6,5]ᵀ @ b [2,4,6]ᵀ (per batch entry)")
    c.finish(t(c.input("a", c.randn(2, 6, 5))) @ t(c.input("b", c.randn(2, 4, 6))))
    c = Case("matmul_shared_b", "a [2,3,5,6] @ b [6,4] (b shared by the batch)")
    c.finish(c.input("a", c.randn(2, 3, 5, 6)) @ c.input("b", c.randn(6, 4)))
    c = Case("linear", "F.linear(x [2,3,6], weight [4,6], bias [4])")
    c.finish(F.linear(c.input("x", c.randn(2, 3, 6)), c.input("weight", c.randn(4, 6)), c.input("bias", c.randn(4))))
    c = Case("linear_nobias", "F.linear(x [5,6], weight [4,6])")
    c.finish(F.linear(c.input("x", c.randn(5, 6)), c.input("weight", c.randn(4, 6))))


def embedding():
    c = Case("embedding", "F.embedding(ids [2,5] in [0,10) with repeats, weight [10,4])")
    ids = c.index("ids", torch.tensor([[1, 3, 3, 9, 0], [3, 7, 1, 1, 5]]))
    c.finish(F.embedding(ids, c.input("weight", c.randn(10, 4))))


def nn_ops():
    c = Case("softmax", "softmax(x [2,3,7], dim=-1)")
    c.finish(torch.softmax(c.input("x", c.randn(2, 3, 7, scale=2.0)), dim=-1))
    c = Case("log_softmax", "log_softmax(x [2,3,7], dim=-1)")
    c.finish(torch.log_softmax(c.input("x", c.randn(2, 3, 7, scale=2.0)), dim=-1))

    c = Case("layer_norm", "F.layer_norm(x [2,3,8], (8,), weight, bias, eps=1e-5)")
    x = c.input("x", c.randn(2, 3, 8, scale=2.0) + 0.5)
    c.finish(F.layer_norm(x, (8,), c.input("weight", 1 + c.randn(8, scale=0.3)), c.input("bias", c.randn(8, scale=0.3)),
                          eps=1e-5))
    c = Case("layer_norm_noaffine", "F.layer_norm(x [4,8], (8,), eps=1e-5)")
    c.finish(F.layer_norm(c.input("x", c.randn(4, 8, scale=2.0) - 0.5), (8,), eps=1e-5))

    c = Case("cross_entropy", "F.cross_entropy(logits [6,5], targets [6])")
    targets = c.index("targets", c.ints(0, 5, 6))
    c.finish(F.cross_entropy(c.input("logits", c.randn(6, 5, scale=2.0)), targets))
    c = Case("cross_entropy_ignore", "F.cross_entropy(logits [8,5], targets [8], ignore_index=-100) (2 ignored)")
    targets = c.index("targets", torch.tensor([2, -100, 0, 4, 4, -100, 1, 3]))
    c.finish(F.cross_entropy(c.input("logits", c.randn(8, 5, scale=2.0)), targets, ignore_index=-100))
    c = Case("cross_entropy_smooth", "F.cross_entropy(logits [2,4,5], targets [2,4], ignore_index=0, "
             "label_smoothing=0.1) (logits permuted to [N,C,T] for torch)")
    targets = c.index("targets", torch.tensor([[1, 0, 4, 2], [3, 3, 0, 1]]))
    logits = c.input("logits", c.randn(2, 4, 5, scale=2.0))
    c.finish(F.cross_entropy(logits.permute(0, 2, 1), targets, ignore_index=0, label_smoothing=0.1))

    c = Case("mse_loss", "F.mse_loss(pred [4,5], target [4,5])")
    c.finish(F.mse_loss(c.input("pred", c.randn(4, 5)), c.input("target", c.randn(4, 5))))

    c = Case("attention", "softmax(q kᵀ/√D) v, q [2,2,5,4], k, v [2,2,7,4]")
    q, k, v = (c.input(n, c.randn(2, 2, t, 4)) for n, t in [("q", 5), ("k", 7), ("v", 7)])
    c.finish(attention(q, k, v, causal=False))
    c = Case("attention_causal", "softmax(q kᵀ/√D + causal mask) v, q, k, v [2,3,6,4]")
    q, k, v = (c.input(n, c.randn(2, 3, 6, 4)) for n in "qkv")
    c.finish(attention(q, k, v, causal=True))
    c = Case("attention_scale", "softmax(q kᵀ·0.3 + causal mask) v, q, k, v [1,2,5,8], scale 0.3")
    q, k, v = (c.input(n, c.randn(1, 2, 5, 8)) for n in "qkv")
    c.finish(attention(q, k, v, causal=True, scale=0.3))

    c = Case("rope", "rope(x [2,3,6,8], base 10000) rotate-half layout")
    c.finish(rope(c.input("x", c.randn(2, 3, 6, 8))))
    c = Case("rope_offset", "rope(x [2,5,12], base 500, start_pos 3) rotate-half layout")
    c.finish(rope(c.input("x", c.randn(2, 5, 12)), base=500.0, start_pos=3))


def conv():
    c = Case("conv2d", "F.conv2d(x [2,3,7,7], weight [4,3,3,3], bias [4], stride=2, padding=1)")
    c.finish(F.conv2d(c.input("x", c.randn(2, 3, 7, 7)), c.input("weight", c.randn(4, 3, 3, 3, scale=0.3)),
                      c.input("bias", c.randn(4)), stride=2, padding=1))
    c = Case("conv2d_nobias", "F.conv2d(x [1,2,6,5], weight [3,2,2,3], stride=1, padding=0)")
    c.finish(F.conv2d(c.input("x", c.randn(1, 2, 6, 5)), c.input("weight", c.randn(3, 2, 2, 3, scale=0.3))))
    c = Case("depthwise_conv2d", "F.conv2d(x [2,4,6,6], weight [4,1,3,3], bias [4], padding=1, groups=4)")
    c.finish(F.conv2d(c.input("x", c.randn(2, 4, 6, 6)), c.input("weight", c.randn(4, 1, 3, 3, scale=0.3)),
                      c.input("bias", c.randn(4)), padding=1, groups=4))
    c = Case("depthwise_conv2d_k5", "F.conv2d(x [1,3,5,7], weight [3,1,5,5], padding=2, groups=3)")
    c.finish(F.conv2d(c.input("x", c.randn(1, 3, 5, 7)), c.input("weight", c.randn(3, 1, 5, 5, scale=0.3)),
                      padding=2, groups=3))

    for name, shape, training in [("batch_norm_train", (4, 3, 5, 5), True), ("batch_norm_train_2d", (8, 3), True),
                                  ("batch_norm_eval", (4, 3, 5, 5), False)]:
        c = Case(name, f"F.batch_norm(x {list(shape)}, running_mean, running_var, weight, bias, "
                 f"training={training}, momentum=0.1, eps=1e-5)")
        x = c.input("x", c.randn(*shape, scale=1.5) + 0.7)
        weight = c.input("weight", 1 + c.randn(3, scale=0.3))
        bias = c.input("bias", c.randn(3, scale=0.3))
        running_mean = c.input("running_mean", c.randn(3, scale=0.5), grad=False).clone()
        running_var = c.input("running_var", c.uniform(0.5, 2.0, 3), grad=False).clone()
        out = F.batch_norm(x, running_mean, running_var, weight, bias, training=training, momentum=0.1, eps=1e-5)
        c.finish(out, extra={"running_mean.after": running_mean, "running_var.after": running_var})


def transformer_block():
    """Pre-LN block, width 32, 4 heads, causal: h = x + proj(attn(LN1(x))); out = h + fc2(gelu(fc1(LN2(h))))."""
    B, T, C, H = 2, 8, 32, 4
    c = Case("transformer_block", "pre-LN block: x + proj(attn(LN1 x)), then h + fc2(gelu(fc1(LN2 h))); "
             "width 32, 4 heads, causal, x [2,8,32]")
    x = c.input("x", c.randn(B, T, C))
    p = {}
    for ln in ["ln1", "ln2"]:
        p[ln + ".weight"] = c.input(ln + ".weight", 1 + c.randn(C, scale=0.2))
        p[ln + ".bias"] = c.input(ln + ".bias", c.randn(C, scale=0.2))
    for name, n_out, n_in in [("attn.q", C, C), ("attn.k", C, C), ("attn.v", C, C), ("attn.proj", C, C),
                              ("mlp.fc1", 4 * C, C), ("mlp.fc2", C, 4 * C)]:
        p[name + ".weight"] = c.input(name + ".weight", c.randn(n_out, n_in, scale=1 / math.sqrt(n_in)))
        p[name + ".bias"] = c.input(name + ".bias", c.randn(n_out, scale=0.1))

    def lin(name, t):
        return F.linear(t, p[name + ".weight"], p[name + ".bias"])

    def heads(t):  # [B, T, C] -> [B, H, T, C/H]
        return t.view(B, T, H, C // H).permute(0, 2, 1, 3)

    a = F.layer_norm(x, (C,), p["ln1.weight"], p["ln1.bias"], eps=1e-5)
    y = attention(heads(lin("attn.q", a)), heads(lin("attn.k", a)), heads(lin("attn.v", a)), causal=True)
    h = x + lin("attn.proj", y.permute(0, 2, 1, 3).reshape(B, T, C))
    m = F.layer_norm(h, (C,), p["ln2.weight"], p["ln2.bias"], eps=1e-5)
    c.finish(h + lin("mlp.fc2", F.gelu(lin("mlp.fc1", m))))


def optimizers():
    """torch.optim's steps when a parameter has no gradient at some steps: each parameter counts its
    own updates (state["step"]), so one that starts late takes a first step. Three tensors in two
    groups: a is updated at every step, b only from step 4 on (frozen before), c at every step but
    the fifth. For each optimizer, the tensors after the 6 steps."""
    gen = torch.Generator().manual_seed(zlib.crc32(b"optim_late_start"))
    shapes = {"a": (3,), "b": (2, 3), "c": (4,)}
    has_grad = {"a": lambda s: True, "b": lambda s: s >= 4, "c": lambda s: s != 5}
    init = {n: torch.randn(sh, generator=gen) for n, sh in shapes.items()}
    grads = {(s, n): torch.randn(sh, generator=gen) for s in range(1, 7) for n, sh in shapes.items() if has_grad[n](s)}
    tensors = {f"init.{n}": t for n, t in init.items()}
    tensors.update({f"grad.{s}.{n}": g for (s, n), g in grads.items()})
    makers = {
        "adamw": lambda g: torch.optim.AdamW(g, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, foreach=False),
        "adam_l2": lambda g: torch.optim.Adam(g, lr=1e-2, betas=(0.8, 0.99), eps=1e-3, foreach=False),
        "sgd_momentum": lambda g: torch.optim.SGD(g, lr=0.1, momentum=0.9, foreach=False),
        "sgd_nesterov": lambda g: torch.optim.SGD(g, lr=0.1, momentum=0.9, nesterov=True, foreach=False),
    }
    for name, make in makers.items():
        p = {n: t.clone().requires_grad_() for n, t in init.items()}
        opt = make([{"params": [p["a"], p["b"]], "weight_decay": 0.1}, {"params": [p["c"]], "weight_decay": 0.0}])
        for s in range(1, 7):
            for n in p:
                p[n].grad = grads[(s, n)].clone() if (s, n) in grads else None
            opt.step()
        tensors.update({f"{name}.{n}": t.detach().clone() for n, t in p.items()})
    meta = {"op": "torch.optim AdamW, Adam, SGD (momentum, Nesterov) over 6 steps; b has no gradient at steps 1-3, "
                  "c none at step 5; groups [a, b] wd 0.1 and [c] wd 0",
            "torch": torch.__version__, "generated_by": "tools/golden.py"}
    write_safetensors(OUT_DIR / "optim_late_start.safetensors", tensors, meta)


def main():
    torch.set_num_threads(1)  # one summation order, whatever the machine
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for old in OUT_DIR.glob("*.safetensors"):
        old.unlink()
    elementwise()
    reduce()
    matmul()
    embedding()
    nn_ops()
    conv()
    transformer_block()
    optimizers()
    files = sorted(OUT_DIR.glob("*.safetensors"))
    total = sum(f.stat().st_size for f in files)
    print(f"wrote {len(files)} files, {total / 1024:.1f} KiB, to {OUT_DIR}")


if __name__ == "__main__":
    main()
