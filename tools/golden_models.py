#!/usr/bin/python3
"""tools/golden_models.py: PyTorch references for whole models (tests/test_golden_models.cpp).

Run with Debian's PyTorch (torch 1.13, CPU), from anywhere:

    /usr/bin/python3 tools/golden_models.py

Each model of nn/ (tiny ViT, TransformerLM Pre-LN and Post-LN, GAU LM, LSTM LM) has a twin here,
written as a plain function of a dict of leaf tensors keyed by our dotted parameter names
("blocks.0.attn.q.weight"), mirroring our forward code op for op. For each model it writes
tests/golden/models/<model>.safetensors holding
    "param.<name>"     every parameter, random from a generator seeded by the model's name,
    "buffer.<name>"    every buffer (the sinusoidal position tables, as our constructors build them),
    the input batch    "images" + "labels" (ViT) or "ids" + "targets" (LMs; int32),
    "logits", "loss"   the forward pass and its mean cross-entropy ([1]),
    "grad.<name>"      d loss / d parameter, for every parameter,
    "losses"           [6]: the loss each of 5 AdamW steps was taken on, then the loss after them,
    "after.<name>"     every parameter after the 5 steps,
and metadata {"model": a description, "torch": version}. AdamW: lr 1e-2, betas (0.9, 0.999),
eps 1e-8, weight decay 0.1 on the tensors nn::param_groups decays and 0 on the rest (see
decays()). Dropout is 0 everywhere, so the twins have none.

The file writer and the attention / rope reference formulas come from tools/golden.py.
"""
import math
import pathlib
import sys
import zlib

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from golden import attention, rope, write_safetensors  # noqa: E402

OUT_DIR = pathlib.Path(__file__).resolve().parent.parent / "tests" / "golden" / "models"

LR, BETAS, EPS, WEIGHT_DECAY, STEPS = 1e-2, (0.9, 0.999), 1e-8, 0.1, 5
# Token embeddings ~ N(0, 0.5²) rather than our N(0, 1): with a tied head, N(0, 1) rows give logits
# of std ~4 and a saturated softmax (loss ~11 on 13 words), whose tiny probabilities make for
# gradients that test little.
EMB_STD = 0.5


# ---------------------------------------------------------------------------------------------
# Parameters: an ordered dict name -> leaf tensor, filled with random values per layer type.

class Params(dict):
    def __init__(self, seed_name):
        super().__init__()
        self.gen = torch.Generator().manual_seed(zlib.crc32(seed_name.encode()))

    def add(self, name, value):
        self[name] = value.float().clone().requires_grad_()

    def uniform(self, name, shape, bound):
        self.add(name, (torch.rand(shape, generator=self.gen) * 2 - 1) * bound)

    def normal(self, name, shape, mean=0.0, std=1.0):
        self.add(name, torch.randn(shape, generator=self.gen) * std + mean)

    # Layers, drawn as our constructors draw them (nn/layers.cpp), except that the LayerNorm and
    # GAU scales and offsets are perturbed away from 1 and 0 so that every one of them matters.
    def linear(self, prefix, fan_in, fan_out, bias=True):
        self.uniform(prefix + ".weight", (fan_out, fan_in), 1 / math.sqrt(fan_in))
        if bias:
            self.uniform(prefix + ".bias", (fan_out,), 1 / math.sqrt(fan_in))

    def layer_norm(self, prefix, dim):
        self.normal(prefix + ".weight", (dim,), 1.0, 0.1)
        self.normal(prefix + ".bias", (dim,), 0.0, 0.1)

    def block(self, prefix, dim, hidden):
        """TransformerBlock: norm1, attn.{q,k,v,proj}, norm2, mlp.{fc1,fc2} (registration order)."""
        self.layer_norm(prefix + ".norm1", dim)
        for name in ("q", "k", "v", "proj"):
            self.linear(f"{prefix}.attn.{name}", dim, dim)
        self.layer_norm(prefix + ".norm2", dim)
        self.linear(prefix + ".mlp.fc1", dim, hidden)
        self.linear(prefix + ".mlp.fc2", hidden, dim)


def decays(name, tensor):
    """nn::param_groups(model, wd, no_decay_embeddings=true): no decay on 1-d tensors, on the
    weights of Embedding modules (tok_emb in our models) and on pos_embed / cls_token. ViT's
    patch_embed.weight, a conv kernel, is decayed (as timm does)."""
    embedding_like = name.startswith("tok_emb.") or "pos_embed" in name or "cls_token" in name
    return tensor.dim() > 1 and not embedding_like


# ---------------------------------------------------------------------------------------------
# Position embeddings (nn/transformer.cpp), computed in float64 as ours, then rounded.

def sincos_1d(T, dim):
    """pe[t, 2i] = sin(t / 10000^(2i/dim)), pe[t, 2i+1] = cos(...): interleaved."""
    i = torch.arange(dim // 2, dtype=torch.float64)
    angle = torch.arange(T, dtype=torch.float64)[:, None] / 10000.0 ** (2 * i / dim)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(T, dim).float()


def sincos_2d(gh, gw, dim):
    """Per token (raster order): [sin(r·ω), cos(r·ω), sin(c·ω), cos(c·ω)], ω_i = 10000^(-i/(dim/4))."""
    quarter = dim // 4
    omega = 1.0 / 10000.0 ** (torch.arange(quarter, dtype=torch.float64) / quarter)
    r = torch.arange(gh, dtype=torch.float64).repeat_interleave(gw)[:, None] * omega
    c = torch.arange(gw, dtype=torch.float64).repeat(gh)[:, None] * omega
    return torch.cat([r.sin(), r.cos(), c.sin(), c.cos()], dim=-1).float()


# ---------------------------------------------------------------------------------------------
# Twins of nn/ modules: functions of (params, prefix, input).

def linear(p, prefix, x):
    return F.linear(x, p[prefix + ".weight"], p.get(prefix + ".bias"))


def layer_norm(p, prefix, x):
    return F.layer_norm(x, x.shape[-1:], p[prefix + ".weight"], p[prefix + ".bias"], eps=1e-5)


def mhsa(p, prefix, x, heads, causal):
    """MultiHeadAttention: separate q, k, v, proj; softmax(q kᵀ/√dh [+ causal mask]) v per head."""
    B, T, C = x.shape

    def split(t):
        return t.reshape(B, T, heads, C // heads).permute(0, 2, 1, 3)

    qh, kh, vh = (split(linear(p, f"{prefix}.{n}", x)) for n in "qkv")
    o = attention(qh, kh, vh, causal=causal)
    return linear(p, prefix + ".proj", o.permute(0, 2, 1, 3).reshape(B, T, C))


def block(p, prefix, x, heads, causal, pre_norm):
    """TransformerBlock. Pre-LN: x + attn(norm1(x)), then + mlp(norm2(.)); Post-LN: norm1(x + attn(x)),
    then norm2(. + mlp(.)). MLP: fc1, exact (erf) GELU, fc2."""
    def mlp(t):
        return linear(p, prefix + ".mlp.fc2", F.gelu(linear(p, prefix + ".mlp.fc1", t)))

    if pre_norm:
        h = x + mhsa(p, prefix + ".attn", layer_norm(p, prefix + ".norm1", x), heads, causal)
        return h + mlp(layer_norm(p, prefix + ".norm2", h))
    h = layer_norm(p, prefix + ".norm1", x + mhsa(p, prefix + ".attn", x, heads, causal))
    return layer_norm(p, prefix + ".norm2", h + mlp(h))


def gau(p, prefix, x, e, s):
    """GAU (nn/gau.cpp): [u|v|z] = silu(hidden(x)); q, k = z⊙γ + β with RoPE (base 10000, rotate
    half); A = relu²(q kᵀ with zeros above the diagonal) / (n·s); out(u ⊙ A v)."""
    n = x.shape[1]
    u, v, z = torch.split(F.silu(linear(p, prefix + ".hidden", x)), [e, e, s], dim=-1)
    q = rope(z * p[prefix + ".gamma_q"] + p[prefix + ".beta_q"])
    k = rope(z * p[prefix + ".gamma_k"] + p[prefix + ".beta_k"])
    scores = (q @ k.transpose(-1, -2)).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), 0.0)
    a = torch.relu(scores) ** 2 / (n * s)
    return linear(p, prefix + ".out", u * (a @ v))


def lstm_layer(p, prefix, x):
    """LSTMLayer: gates = x W_ihᵀ + b_ih + h W_hhᵀ + b_hh in order i, f, g, o; c = σ(f)c + σ(i)tanh(g),
    h = σ(o)tanh(c); zero initial state."""
    B, T, _ = x.shape
    H = p[prefix + ".weight_hh"].shape[1]
    xw = F.linear(x, p[prefix + ".weight_ih"], p[prefix + ".bias_ih"])
    h, c = x.new_zeros(B, H), x.new_zeros(B, H)
    outs = []
    for t in range(T):
        gates = xw[:, t] + F.linear(h, p[prefix + ".weight_hh"], p[prefix + ".bias_hh"])
        i, f, g, o = gates.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs, dim=1)


# ---------------------------------------------------------------------------------------------
# Models: each returns (params, buffers, inputs, forward, loss_fn, description).

def vit():
    image, patch, channels, classes, dim, depth, heads, B = 8, 4, 3, 3, 16, 2, 2, 2
    grid = image // patch
    p = Params("vit")
    p.uniform("patch_embed.weight", (dim, channels, patch, patch), 1 / math.sqrt(channels * patch * patch))
    p.uniform("patch_embed.bias", (dim,), 1 / math.sqrt(channels * patch * patch))
    p.normal("cls_token", (1, 1, dim), std=0.5)
    for i in range(depth):
        p.block(f"blocks.{i}", dim, 4 * dim)
    p.layer_norm("norm", dim)
    p.linear("head", dim, classes)
    buffers = {"pos_embed": torch.cat([torch.zeros(1, dim), sincos_2d(grid, grid, dim)]).reshape(1, -1, dim)}
    images = torch.randn(B, channels, image, image, generator=p.gen)
    labels = torch.randint(0, classes, (B,), generator=p.gen)

    def forward():
        x = F.conv2d(images, p["patch_embed.weight"], p["patch_embed.bias"], stride=patch)  # [B, d, g, g]
        x = x.flatten(2).transpose(1, 2)
        x = torch.cat([p["cls_token"].expand(B, 1, dim), x], dim=1) + buffers["pos_embed"]
        for i in range(depth):
            x = block(p, f"blocks.{i}", x, heads, causal=False, pre_norm=True)
        return linear(p, "head", layer_norm(p, "norm", x)[:, 0])

    desc = (f"ViT image {image} patch {patch} dim {dim} depth {depth} heads {heads} mlp {4 * dim} cls pooling "
            f"sincos2d, {classes} classes, batch {B}")
    inputs = {"images": images, "labels": labels}
    return p, buffers, inputs, forward, lambda logits: F.cross_entropy(logits, labels), desc


def lm_batch(p, vocab, B, T):
    """ids [B, T] and next-token targets [B, T] cut from one random [B, T+1] stream."""
    stream = torch.randint(0, vocab, (B, T + 1), generator=p.gen)
    return stream[:, :-1], stream[:, 1:]


def lm_loss(targets):
    return lambda logits: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def transformer_lm(pre_norm):
    vocab, dim, depth, heads, max_len, B, T = 13, 16, 2, 2, 16, 2, 8
    name = "transformer_lm_" + ("preln" if pre_norm else "postln")
    p = Params(name)
    p.normal("tok_emb.weight", (vocab, dim), std=EMB_STD)
    for i in range(depth):
        p.block(f"blocks.{i}", dim, 4 * dim)
    if pre_norm:
        p.layer_norm("norm", dim)
    buffers = {"pos_embed": sincos_1d(max_len, dim)}
    ids, targets = lm_batch(p, vocab, B, T)

    def forward():
        x = F.embedding(ids, p["tok_emb.weight"]) + buffers["pos_embed"][:T]
        for i in range(depth):
            x = block(p, f"blocks.{i}", x, heads, causal=True, pre_norm=pre_norm)
        if pre_norm:
            x = layer_norm(p, "norm", x)
        return F.linear(x, p["tok_emb.weight"])  # tied head

    desc = (f"TransformerLM vocab {vocab} dim {dim} depth {depth} heads {heads} mlp {4 * dim} max_len {max_len} "
            f"sinusoidal, tied, {'Pre' if pre_norm else 'Post'}-LN, batch {B}x{T}")
    return p, buffers, {"ids": ids, "targets": targets}, forward, lm_loss(targets), desc


def gau_lm():
    vocab, dim, depth, e, s, B, T = 13, 16, 2, 32, 8, 2, 8
    p = Params("gau_lm")
    p.normal("tok_emb.weight", (vocab, dim), std=EMB_STD)
    for i in range(depth):
        pre = f"layers.{i}"
        p.linear(pre + ".hidden", dim, 2 * e + s)
        p.linear(pre + ".out", e, dim)
        for g in ("q", "k"):
            p.normal(f"{pre}.gamma_{g}", (s,), 1.0, 0.1)
            p.normal(f"{pre}.beta_{g}", (s,), 0.0, 0.1)
    for i in range(depth):
        p.layer_norm(f"norms.{i}", dim)
    ids, targets = lm_batch(p, vocab, B, T)

    def forward():
        x = F.embedding(ids, p["tok_emb.weight"])
        for i in range(depth):
            x = layer_norm(p, f"norms.{i}", x + gau(p, f"layers.{i}", x, e, s))  # Post-Norm
        return F.linear(x, p["tok_emb.weight"])  # tied head

    desc = f"GAULM vocab {vocab} dim {dim} depth {depth} e {e} s {s} Post-Norm RoPE tied, batch {B}x{T}"
    return p, {}, {"ids": ids, "targets": targets}, forward, lm_loss(targets), desc


def lstm_lm():
    vocab, hidden, layers, B, T = 13, 16, 2, 2, 8
    p = Params("lstm_lm")
    p.normal("tok_emb.weight", (vocab, hidden), std=EMB_STD)
    bound = 1 / math.sqrt(hidden)
    for i in range(layers):
        p.uniform(f"layers.{i}.weight_ih", (4 * hidden, hidden), bound)
        p.uniform(f"layers.{i}.weight_hh", (4 * hidden, hidden), bound)
        p.uniform(f"layers.{i}.bias_ih", (4 * hidden,), bound)
        p.uniform(f"layers.{i}.bias_hh", (4 * hidden,), bound)
    p.linear("head", hidden, vocab)
    ids, targets = lm_batch(p, vocab, B, T)

    def body():
        x = F.embedding(ids, p["tok_emb.weight"])
        for i in range(layers):
            x = lstm_layer(p, f"layers.{i}", x)
        return x

    check_lstm_twin(p, layers, body(), F.embedding(ids, p["tok_emb.weight"]))
    desc = f"LSTMLM vocab {vocab} hidden {hidden} layers {layers} untied, zero initial state, batch {B}x{T}"
    return p, {}, {"ids": ids, "targets": targets}, lambda: linear(p, "head", body()), lm_loss(targets), desc


def check_lstm_twin(p, layers, ours, x):
    """The hand-written LSTM (gate order included) against torch.nn.LSTM with the same weights."""
    hidden = x.shape[-1]
    ref = torch.nn.LSTM(hidden, hidden, num_layers=layers, batch_first=True)
    with torch.no_grad():
        for i in range(layers):
            for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(ref, f"{n}_l{i}").copy_(p[f"layers.{i}.{n}"])
        want = ref(x)[0]
    assert torch.allclose(ours, want, atol=1e-6), (ours - want).abs().max()


def check_attention_twin():
    """mhsa() (causal) against torch.nn.MultiheadAttention with the same weights."""
    p, dim, heads = Params("mhsa_check"), 16, 2
    for n in "qkv":
        p.linear(f"attn.{n}", dim, dim)
    p.linear("attn.proj", dim, dim)
    x = torch.randn(2, 5, dim, generator=p.gen)
    ref = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([p[f"attn.{n}.weight"] for n in "qkv"]))
        ref.in_proj_bias.copy_(torch.cat([p[f"attn.{n}.bias"] for n in "qkv"]))
        ref.out_proj.weight.copy_(p["attn.proj.weight"])
        ref.out_proj.bias.copy_(p["attn.proj.bias"])
        mask = torch.ones(5, 5, dtype=torch.bool).triu(1)
        want = ref(x, x, x, attn_mask=mask, need_weights=False)[0]
        got = mhsa(p, "attn", x, heads, causal=True)
    assert torch.allclose(got, want, atol=1e-6), (got - want).abs().max()


# ---------------------------------------------------------------------------------------------

def write(name, model):
    p, buffers, inputs, forward, loss_fn, desc = model
    tensors = {"param." + n: t.detach().clone() for n, t in p.items()}  # before the steps change them
    tensors.update({"buffer." + n: t for n, t in buffers.items()})
    tensors.update({n: t.to(torch.int32) if t.dtype == torch.int64 else t for n, t in inputs.items()})

    groups = [{"params": [t for n, t in p.items() if decays(n, t)], "weight_decay": WEIGHT_DECAY},
              {"params": [t for n, t in p.items() if not decays(n, t)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, foreach=False)
    losses = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        logits = forward()
        loss = loss_fn(logits)
        loss.backward()
        if step == 0:
            tensors["logits"] = logits.detach().clone()
            tensors["loss"] = loss.detach().reshape(1).clone()
            for n, t in p.items():
                assert t.grad is not None, f"{name}: no gradient reached {n}"
                tensors["grad." + n] = t.grad.clone()
        losses.append(loss.item())
        opt.step()
    with torch.no_grad():
        losses.append(loss_fn(forward()).item())
    tensors["losses"] = torch.tensor(losses)
    tensors.update({"after." + n: t.detach().clone() for n, t in p.items()})

    meta = {"model": desc, "optimizer": f"AdamW lr {LR} betas {BETAS} eps {EPS} wd {WEIGHT_DECAY} (≥2-d, not emb), "
            f"{STEPS} steps", "torch": torch.__version__, "generated_by": "tools/golden_models.py"}
    write_safetensors(OUT_DIR / f"{name}.safetensors", tensors, meta)
    print(f"{name:<22} {len(p)} parameters, loss {losses[0]:.4f} -> {losses[-1]:.4f}")


def main():
    torch.set_num_threads(1)  # one summation order, whatever the machine
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for old in OUT_DIR.glob("*.safetensors"):
        old.unlink()
    check_attention_twin()
    write("vit", vit())
    write("transformer_lm_preln", transformer_lm(pre_norm=True))
    write("transformer_lm_postln", transformer_lm(pre_norm=False))
    write("gau_lm", gau_lm())
    write("lstm_lm", lstm_lm())
    files = sorted(OUT_DIR.glob("*.safetensors"))
    total = sum(f.stat().st_size for f in files)
    print(f"wrote {len(files)} files, {total / 1024:.1f} KiB, to {OUT_DIR}")


if __name__ == "__main__":
    main()
