// apps/inspect_init.cpp: what an initialization scheme does to a model, layer by layer, before any
// training.
//
//   ./apps/inspect_init --model vit-tiny --init mimetic
//   ./apps/inspect_init --model vit-tiny --init impulse3 --json > imp3.jsonl
//   ./apps/inspect_init --model lm --init mimetic+smallemb --png out/mimetic_lm
//
// Per transformer block it reports
//   qk_diag_mean, qk_offdiag_rms   mean of the diagonal and rms of the off-diagonal entries of
//                                  Σ_h W_q⁽ʰ⁾W_k⁽ʰ⁾ᵀ = q.weightᵀ·k.weight (d×d, the input space)
//   vo_diag_mean, vo_offdiag_rms   the same for W_vW_proj = v.weightᵀ·proj.weightᵀ
//   attn_self                      mean attention a token pays to itself (batch, heads, queries)
//   attn_dist, attn_dist_off       mean attention distance (ViT paper, Fig. 7) of the batch- and
//                                  head-mean map: in tokens for an LM (uniform causal attention
//                                  gives (T−1)/4, 31.75 at T = 128), in patches for a ViT (the
//                                  class token left out); _off leaves out each query's own key, so
//                                  it says how far a query looks when it looks away from itself
//   act_std                        std of the block's output on one batch
//   mlp_hid_std, mlp_out_std       std of the MLP's hidden activation (fc2's input, after the
//                                  GELU) and of the MLP branch's output (fc2's): a small fc1
//                                  keeps the GELU near its linear part and the branch quiet
//   grad_std                       std of the loss gradient at the block's output (cross-entropy
//                                  against random labels / next tokens)
//   tok_cos                        mean cosine similarity between two different tokens of one input
//                                  at the block's output (all pairs, averaged over the batch): 1 when
//                                  every token carries the same vector ("rank collapse")
//   pos_share                      the share of the block output's variance over the batch that is
//                                  the position's (apps/common/token_similarity.h): how much of an
//                                  absolute position embedding survives to this block; content
//                                  alone leaves about 1/batch
//   grad_cos                       the same figure for the loss gradient at the block's output:
//                                  near 1 when the gradient asks every token to move the same way,
//                                  so any update that follows it adds one shared vector to all of
//                                  them (docs/RESULTS.md section 3). With --pool avg the ViT's
//                                  gradient is shared by construction above its last LayerNorm.
//   grad_rank1 (--json only)       per weight of the block (q, k, v, proj, fc1, fc2), the share of
//                                  its loss gradient's squared norm in the top singular direction:
//                                  1 when the gradient is u·vᵀ, as it is when the tokens share an
//                                  input component and a gradient component (the sum over tokens
//                                  Σ δ_t x_tᵀ then has a term T·δ̄·x̄ᵀ). Adam's first step,
//                                  lr·sign(gradient), keeps a rank-one gradient rank one.
// For --model gau (train_lm's GAU LM) the rows have act_std, grad_std, tok_cos, pos_share and
// grad_cos only: a GAU has no W_q, W_k, W_v, no softmax map and no MLP.
// Before the rows come the init's own report (for impulse schemes the fit figures: MSE, hit rate,
// seconds) and the whole model's figures: tok_cos and pos_share of the embedding (the blocks'
// input), the batch's cross-entropy at these weights, and for an LM `copy_top1`, the share of
// positions whose top logit is the input token itself (and no other token's: equal logits predict
// nothing). A tied N(0, 1) embedding makes that share large at init (the head scores each token
// against its own embedding), a prior of "repeat the last token".
// --png DIR writes, for a few layers, W_qW_kᵀ and W_vW_proj (diverging colormap, symmetric about 0,
// clipped at the 99.5th percentile of |entries|) and the attention map averaged over the batch and
// the heads (sequential colormap, 0 to its maximum), as in Fig. 1–2 of the mimetic paper. The
// PNGs are written by data/image_codec (the project compiles stb_image_write there, once).
//
// Inputs: random N(0, 1) images / uniform random tokens, unless --data-dir points at CIFAR-10
// (binary release or an image folder such as ../shared/data/cifar10-jpeg) for a ViT, or --dataset
// names a text corpus for an LM (windows of its validation split; the vocabulary, and so the
// model's, is train_lm's: built from the training split, so a train_lm checkpoint loads).
//
//   ./apps/inspect_init --model lm-small --dataset ptb-char --post-ln --depth 24 --untied --init torch
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include "apps/common/attention_distance.h"
#include "apps/common/run.h"
#include "apps/common/token_similarity.h"
#include "apps/common/top1.h"
#include "data/cifar.h"
#include "data/image.h"
#include "data/image_codec.h"
#include "data/image_folder.h"
#include "data/paths.h"
#include "data/text.h"
#include "engine/error.h"
#include "engine/linalg.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "init/init.h"
#include "nn/checkpoint.h"
#include "nn/gau.h"
#include "nn/transformer.h"

using namespace engine;
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct Args {
    std::string model = "vit-tiny", init = "timm";
    init::Options opt;
    int64_t batch = 32, seq_len = 128, max_len = 512, gau_s = 128, patch = 4, depth = 0, dim = 0, heads = 0;
    std::string pool = "avg", pos = "", data_dir, png_dir, png_layers, checkpoint, dataset;
    float pe_scale = 1.f, emb_scale = 1.f, layerscale = 0.f, perturb = 0.f;
    bool post_ln = false, gau_pre_norm = false, untied = false, head_bias = false, json_out = false,
         pe_every_block = false, fc_norm = false;
    uint64_t seed = 0;
    std::string device = "cpu";
    Device dev = Device::CPU;  // resolved from --device
};

// ---------------------------------------------------------------------------------------------
// The model and its inputs

struct Subject {
    std::shared_ptr<nn::Module> module;
    nn::ViT* vit = nullptr;
    nn::TransformerLM* lm = nullptr;
    nn::GAULM* gau = nullptr;
    std::vector<nn::TransformerBlock*> blocks;  // empty for the GAU, which has no W_q, W_k, W_v
    int64_t layers = 0, vocab = 0;
    std::string description;
    Tensor inputs, targets;  // images [B,3,H,W] or ids [B,T]; labels [B] or next tokens [B,T]
    std::string inputs_from;  // for the report's first line
};

// The LM's text: the corpus --dataset names, from --data-dir or its default folder (INITLAB_DATA).
static data::TextCorpus load_text(const Args& a) {
    std::string dir = a.data_dir.empty() ? data::default_data_dir(a.dataset) : a.data_dir;
    check(!dir.empty() && fs::is_directory(dir), "--dataset {}: no folder '{}'; pass --data-dir DIR or set "
          "INITLAB_DATA to the folder that holds {}/", a.dataset, dir, data::dataset_folder(a.dataset));
    return data::load_corpus(a.dataset, dir);
}

// --depth, --dim and --heads (when not 0) replace the preset's sizes, for either config.
template <typename Config>
static void override_sizes(const Args& a, Config& c) {
    if (a.depth > 0) c.depth = a.depth;
    if (a.dim > 0) c.dim = a.dim;
    if (a.heads > 0) c.heads = a.heads;
}

// "sincos2d", or "sincos2d × 18" where the position embedding is scaled.
static std::string pe_name(const std::string& pos, float scale) {
    return scale == 1.f ? pos : fmt::format("{} × {}", pos, scale);
}

static Subject build(const Args& a, const data::TextCorpus* text) {
    Subject s;
    if (a.model == "vit-tiny" || a.model == "vit-small") {
        nn::ViTConfig c = a.model == "vit-tiny" ? nn::ViTConfig::tiny() : nn::ViTConfig::small();
        c.patch = a.patch;
        c.pool = a.pool;
        c.fc_norm = a.fc_norm;
        c.pos = a.pos.empty() ? "sincos2d" : a.pos;
        c.pe_scale = a.pe_scale;
        c.layerscale = a.layerscale;
        override_sizes(a, c);
        auto vit = std::make_shared<nn::ViT>(c);
        s.vit = vit.get();
        s.module = vit;
        for (auto& b : *vit->blocks) s.blocks.push_back(b.get());
        s.layers = c.depth;
        s.description = fmt::format("{} (ViT {}/{}/{}, patch {} on {}x{}, {} pooling, {} PE)", a.model, c.dim, c.depth,
                                    c.heads, c.patch, c.image_size, c.image_size, c.fc_norm ? "avg + fc-norm" : c.pool,
                                    pe_name(c.pos, c.pe_scale));
    } else if (a.model == "gau") {  // train_lm --model gau: e = 2d, rotary embeddings, one head
        nn::GAUConfig c;
        c.vocab = text ? (int64_t)text->vocab.size() : 50;
        c.dim = a.dim > 0 ? a.dim : 128;
        c.depth = a.depth > 0 ? a.depth : 4;
        c.expansion = 2 * c.dim;
        c.s = a.gau_s;
        c.post_norm = !a.gau_pre_norm;
        c.tie_weights = !a.untied;
        auto gau = std::make_shared<nn::GAULM>(c);
        s.gau = gau.get();
        s.module = gau;
        s.layers = c.depth, s.vocab = c.vocab;
        s.description = fmt::format("gau (GAULM {}/{}, s {}, vocab {}, {}, {}, {} tokens)", c.dim, c.depth, c.s,
                                    c.vocab, c.post_norm ? "Post-Norm" : "Pre-Norm",
                                    c.tie_weights ? "tied" : "untied", a.seq_len);
    } else {
        nn::LMConfig c;
        if (a.model == "lm") {  // the mimetic paper's char-PTB transformer: 384 wide, 12 deep, 8 heads
            c.dim = 384;
            c.depth = 12;
            c.heads = 8;
        } else {  // lm-small
            c.dim = 128;
            c.depth = 4;
            c.heads = 4;
        }
        c.vocab = text ? (int64_t)text->vocab.size() : 50;
        c.tie_weights = !a.untied;
        c.head_bias = a.head_bias;
        c.max_len = std::max(a.max_len, a.seq_len);  // as train_lm builds it, so its checkpoints load
        c.pos = a.pos.empty() ? "sinusoidal" : a.pos;
        c.pe_scale = a.pe_scale;
        c.emb_scale = a.emb_scale;
        c.pe_every_block = a.pe_every_block;
        c.pre_norm = !a.post_ln;
        c.emb_norm = c.pre_norm && a.init.find("smallemb") != std::string::npos;
        c.layerscale = a.layerscale;
        override_sizes(a, c);
        auto lm = std::make_shared<nn::TransformerLM>(c);
        s.lm = lm.get();
        s.module = lm;
        for (auto& b : *lm->blocks) s.blocks.push_back(b.get());
        s.layers = c.depth, s.vocab = c.vocab;
        s.description = fmt::format("{} (TransformerLM {}/{}/{}, vocab {}, {}{}{}, {} PE{}, {}, {} tokens)", a.model,
                                    c.dim, c.depth, c.heads, c.vocab, c.pre_norm ? "Pre-LN" : "Post-LN",
                                    c.emb_norm ? " + emb_norm" : "",
                                    c.emb_scale == 1.f ? "" : fmt::format(", token embedding × {}", c.emb_scale),
                                    pe_name(c.pos, c.pe_scale),
                                    c.pe_every_block ? " before every block" : "", c.tie_weights ? "tied" : "untied",
                                    a.seq_len);
    }
    s.module->eval();
    return s;
}

// CIFAR-10 images for the ViT: the binary release, or an image folder (its test/ split if it has
// one), the first `batch` images.
static void load_images(const Args& a, Subject& s) {
    data::ImageSet set;
    bool binary = true;
    try {
        for (auto& f : data::cifar_files(data::CifarKind::Cifar10, a.data_dir, "test"))
            if (!fs::exists(f)) binary = false;
    } catch (const Error&) {
        binary = false;
    }
    if (binary) {
        set = data::load_cifar(data::CifarKind::Cifar10, a.data_dir, "test");
    } else {
        std::string dir = fs::is_directory(fs::path(a.data_dir) / "test") ? a.data_dir + "/test" : a.data_dir;
        data::FolderOptions fo;
        fo.max_per_class = std::max<int64_t>(1, (a.batch + 9) / 10);
        set = data::load_image_folder(dir, fo);
    }
    check(set.h == s.vit->cfg.image_size && set.w == s.vit->cfg.image_size, "inspect_init: images in {} are {}x{}, "
          "the model takes {}x{}", a.data_dir, set.h, set.w, s.vit->cfg.image_size, s.vit->cfg.image_size);
    // Spread the batch over the classes: every k-th image.
    std::vector<int64_t> idx;
    int64_t n = std::min<int64_t>(a.batch, set.n), step = std::max<int64_t>(1, set.n / n);
    for (int64_t i = 0; i < n; i++) idx.push_back(i * step);
    s.inputs = data::images_tensor(set, idx, data::cifar10_normalize());
    s.targets = data::labels_tensor(set, idx);
    s.inputs_from = "images from " + a.data_dir;
    check(set.num_classes() <= s.vit->cfg.num_classes, "inspect_init: {} has {} classes, the head has {}",
          a.data_dir, set.num_classes(), s.vit->cfg.num_classes);
}

// `batch` windows of seq_len + 1 tokens, spread evenly over the validation split: ids and their
// next tokens.
static void load_windows(const Args& a, const data::TextCorpus& text, Subject& s) {
    const std::vector<int32_t>& v = text.valid;
    int64_t T = a.seq_len;
    check((int64_t)v.size() >= T + 1, "--dataset {}: the validation split ({}) has {} tokens, fewer than --seq-len "
          "{} + 1", a.dataset, text.valid_file, v.size(), T);
    int64_t starts = (int64_t)v.size() - T, step = std::max<int64_t>(1, starts / a.batch);
    std::vector<int32_t> ids, next;
    for (int64_t b = 0; b < a.batch; b++) {
        int64_t at = (b * step) % starts;
        ids.insert(ids.end(), v.begin() + at, v.begin() + at + T);
        next.insert(next.end(), v.begin() + at + 1, v.begin() + at + T + 1);
    }
    s.inputs = Tensor::from_vector(ids, {a.batch, T});
    s.targets = Tensor::from_vector(next, {a.batch, T});
    s.inputs_from = fmt::format("windows of {}'s validation split ({})", a.dataset, text.valid_file);
}

static void make_inputs(const Args& a, const data::TextCorpus* text, Subject& s) {
    if (s.vit) {
        if (!a.data_dir.empty()) return load_images(a, s);
        int64_t hw = s.vit->cfg.image_size;
        s.inputs = Tensor::normal({a.batch, 3, hw, hw});
        s.targets = Tensor::randint({a.batch}, 0, (int32_t)s.vit->cfg.num_classes);
        s.inputs_from = "random N(0,1) images, random labels";
    } else {
        if (text) return load_windows(a, *text, s);
        s.inputs = Tensor::randint({a.batch, a.seq_len}, 0, (int32_t)s.vocab);
        s.targets = Tensor::randint({a.batch, a.seq_len}, 0, (int32_t)s.vocab);
        s.inputs_from = "random tokens, random targets";
    }
}

// ---------------------------------------------------------------------------------------------
// One forward/backward with a probe after every block
//
// The models' forward() cannot expose the residual stream between blocks, so this mirrors
// ViT::forward, TransformerLM::forward and GAULM::trunk block by block (keep them in step). After
// block l the stream gets + probe_l, a zero leaf that requires grad: its gradient is
// dL/d(block l's output).

struct LayerStats {
    double qk_diag = 0, qk_off = 0, vo_diag = 0, vo_off = 0, attn_self = 0, attn_dist = 0, attn_dist_off = 0,
           act_std = 0, grad_std = 0, tok_cos = 0, pos_share = 0, grad_cos = 0, mlp_hid_std = 0, mlp_out_std = 0;
    std::vector<std::pair<std::string, double>> grad_rank1;  // weight name -> σ₁² / Σσ² of its gradient
    Tensor qk, vo, attn;  // [d,d], [d,d], [T,T] (mean over batch and heads)
};

// σ₁² / Σσ² of a gradient matrix (0 for a zero gradient, NaN for a non-finite one: a diverged
// checkpoint's, which the SVD would refuse).
static double top_singular_share(const Tensor& g) {
    const float* d = g.data_f32();
    if (!std::all_of(d, d + g.numel(), [](float v) { return std::isfinite(v); })) return std::nan("");
    Tensor sv = svd(g).S;
    const float* p = sv.data_f32();
    double total = 0;
    for (int64_t i = 0; i < sv.numel(); i++) total += (double)p[i] * p[i];
    return total > 0 ? (double)p[0] * p[0] / total : 0.0;
}

static double std_of(const Tensor& t) {
    const float* p = t.data_f32();
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < t.numel(); i++) s += p[i];
    double m = s / t.numel();
    for (int64_t i = 0; i < t.numel(); i++) s2 += (p[i] - m) * (p[i] - m);
    return std::sqrt(s2 / t.numel());
}

static void matrix_stats(const Tensor& m, double& diag_mean, double& offdiag_rms) {
    int64_t d = m.size(0);
    const float* p = m.data_f32();
    double diag = 0, off = 0;
    for (int64_t i = 0; i < d; i++)
        for (int64_t j = 0; j < d; j++) {
            double v = p[i * d + j];
            if (i == j) diag += v;
            else off += v * v;
        }
    diag_mean = diag / d;
    offdiag_rms = std::sqrt(off / (double)(d * d - d));
}

struct ModelStats {
    double embed_tok_cos = 0;         // tok_cos of the blocks' input
    double embed_pos_share = 0;       // pos_share of the blocks' input
    double loss = 0;                  // the batch's cross-entropy, nats
    double copy_top1 = std::nan("");  // LM: share of positions whose top logit is the input token
};

// The figures of every block, and those of the whole model in `model`.
static std::vector<LayerStats> inspect(Subject& s, ModelStats& model) {
    std::vector<LayerStats> out(s.layers);
    {
        NoGrad ng;
        for (size_t l = 0; l < s.blocks.size(); l++) {
            auto& a = *s.blocks[l]->attn;
            // The products on the model's device, the statistics and pictures on the host.
            out[l].qk = matmul(a.q->weight, a.k->weight, true, false).to(Device::CPU);    // q.weightᵀ·k.weight
            out[l].vo = matmul(a.v->weight, a.proj->weight, true, true).to(Device::CPU);  // v.weightᵀ·proj.weightᵀ
            matrix_stats(out[l].qk, out[l].qk_diag, out[l].qk_off);
            matrix_stats(out[l].vo, out[l].vo_diag, out[l].vo_off);
        }
    }
    s.module->zero_grad();
    Tensor x;
    if (s.vit) {
        x = s.vit->embed(s.inputs);
    } else if (s.gau) {
        x = s.gau->drop->forward(s.gau->tok_emb->forward(s.inputs));
    } else {
        x = s.lm->embed(s.inputs);
    }
    // tok_cos needs tokens: the ViT's patches (and class token) are its tokens.
    apps::TokenPlaces places = s.vit ? apps::patch_places(s.vit->cfg.image_size / s.vit->cfg.patch,
                                                           s.vit->cls_token.defined())
                                     : apps::sequence_places(x.size(1));
    model.embed_tok_cos = apps::token_cosine(x.detach());
    model.embed_pos_share = apps::position_share(x.detach());
    std::vector<Tensor> probes, acts;
    for (int64_t l = 0; l < s.layers; l++) {
        if (s.gau) {  // GAULM::trunk's step, without dropout (eval)
            const nn::GAU& layer = (*s.gau->layers)[l];
            const nn::LayerNorm& norm = (*s.gau->norms)[l];
            x = s.gau->cfg.post_norm ? norm.forward_sum(x, layer.forward(x)) : layer.forward(norm.forward(x), x);
        } else {
            auto& b = *s.blocks[l];
            x = s.lm ? s.lm->block_input(x, l) : x;
            {
                NoGrad ng;
                Tensor maps = b.attn->attention_map(b.pre_norm ? b.norm1->forward(x) : x);  // [B, H, T, T]
                int64_t T = maps.size(2);
                out[l].attn = mean(maps.reshape({-1, T, T}), {0}).to(Device::CPU);
                const float* p = out[l].attn.data_f32();
                double self = 0;
                for (int64_t i = 0; i < T; i++) self += p[i * T + i];
                out[l].attn_self = self / T;
                out[l].attn_dist = apps::mean_attention_distance(out[l].attn, places);
                out[l].attn_dist_off = apps::mean_attention_distance(out[l].attn, places, true);
            }
            // fc2's input is the MLP's hidden activation, its output the branch's.
            nn::Linear& fc2 = *b.mlp->fc2;
            fc2.input_hook = [&](const nn::Module&, const Tensor& h) {
                out[l].mlp_hid_std = std_of(h.detach().to(Device::CPU));
            };
            fc2.forward_hook = [&](const nn::Module&, const Tensor& y) {
                out[l].mlp_out_std = std_of(y.detach().to(Device::CPU));
            };
            x = b.forward(x);
            fc2.input_hook = nullptr;
            fc2.forward_hook = nullptr;
        }
        Tensor probe = x.new_zeros(x.shape());
        probe.requires_grad_(true);
        x = add(x, probe);
        probes.push_back(probe);
        acts.push_back(x.detach());
    }
    Tensor logits;
    if (s.vit) {
        logits = s.vit->classify(x);
    } else if (s.gau) {
        if (s.gau->final_norm) x = s.gau->final_norm->forward(x);
        logits = s.gau->head ? s.gau->head->forward(x) : linear(x, s.gau->tok_emb->weight);
    } else {
        if (s.lm->norm) x = s.lm->norm->forward(x);
        logits = s.lm->head ? s.lm->head->forward(x) : linear(x, s.lm->tok_emb->weight);
    }
    if (!s.vit)
        model.copy_top1 =
            (double)apps::top1_matches(logits, s.inputs, apps::Ties::NoMatch) / (double)s.inputs.numel();
    Tensor loss = cross_entropy(logits, s.targets);
    model.loss = loss.item();
    loss.backward();
    for (int64_t l = 0; l < s.layers; l++) {
        Tensor act = acts[l].to(Device::CPU);
        out[l].act_std = std_of(act);
        out[l].tok_cos = apps::token_cosine(act);
        out[l].pos_share = apps::position_share(act);
        Tensor g = probes[l].grad();
        if (!g.defined()) continue;  // no path to the loss (a zeroed head): both stay 0
        g = g.to(Device::CPU);
        out[l].grad_std = std_of(g);
        out[l].grad_cos = apps::token_cosine(g);
    }
    for (size_t l = 0; l < s.blocks.size(); l++) {
        auto& b = *s.blocks[l];
        for (auto [name, layer] : {std::pair<const char*, nn::Linear*>{"q", b.attn->q.get()}, {"k", b.attn->k.get()},
                                   {"v", b.attn->v.get()}, {"proj", b.attn->proj.get()},
                                   {"fc1", b.mlp->fc1.get()}, {"fc2", b.mlp->fc2.get()}}) {
            Tensor g = layer->weight.grad();
            if (g.defined()) out[l].grad_rank1.emplace_back(name, top_singular_share(g.to(Device::CPU)));
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Pictures

struct Rgb {
    float r, g, b;
};

static Rgb lerp(Rgb a, Rgb b, float t) { return {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t}; }

// Piecewise-linear colormap through evenly spaced anchors, t in [0, 1].
static Rgb colormap(const std::vector<Rgb>& anchors, float t) {
    t = std::clamp(t, 0.f, 1.f) * (float)(anchors.size() - 1);
    size_t i = std::min((size_t)t, anchors.size() - 2);
    return lerp(anchors[i], anchors[i + 1], t - (float)i);
}

// Blue - white - red (ColorBrewer RdBu ends) for signed matrices; viridis anchors for maps.
static const std::vector<Rgb> kDiverging = {{33, 102, 172}, {247, 247, 247}, {178, 24, 43}};
static const std::vector<Rgb> kSequential = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};

// Writes m [rows, cols] as a PNG, each entry a square of pixels so the image is >= 384 px.
// signed_scale > 0: diverging, −scale..scale; otherwise sequential 0..max.
static void write_matrix_png(const std::string& path, const Tensor& m, float signed_scale) {
    int64_t rows = m.size(0), cols = m.size(1);
    int px = (int)std::max<int64_t>(1, (384 + std::max(rows, cols) - 1) / std::max(rows, cols));
    const float* p = m.data_f32();
    float maxv = 0;
    for (int64_t i = 0; i < rows * cols; i++) maxv = std::max(maxv, p[i]);
    int h = (int)rows * px, w = (int)cols * px;
    std::vector<uint8_t> rgb((size_t)h * w * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float v = p[(y / px) * cols + x / px];
            Rgb c = signed_scale > 0 ? colormap(kDiverging, 0.5f + 0.5f * v / signed_scale)
                                     : colormap(kSequential, maxv > 0 ? v / maxv : 0.f);
            uint8_t* o = &rgb[((size_t)y * w + x) * 3];
            o[0] = (uint8_t)std::lround(c.r);
            o[1] = (uint8_t)std::lround(c.g);
            o[2] = (uint8_t)std::lround(c.b);
        }
    data::write_png(path, rgb.data(), h, w);
}

// The 99.5th percentile of |entries|: the diagonal may saturate, the noise stays visible.
static float robust_scale(const Tensor& m) {
    std::vector<float> a = m.to_vector();
    for (float& v : a) v = std::fabs(v);
    size_t k = std::min(a.size() - 1, (size_t)(0.995 * a.size()));
    std::nth_element(a.begin(), a.begin() + k, a.end());
    return a[k] > 0 ? a[k] : 1.f;
}

static std::vector<size_t> png_layer_list(const std::string& spec, size_t depth) {
    std::vector<size_t> out;
    if (spec.empty()) {
        out = {0, depth / 3, (2 * depth) / 3, depth - 1};
    } else {
        size_t start = 0;
        while (start <= spec.size()) {
            size_t comma = spec.find(',', start);
            std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            char* end = nullptr;
            long v = std::strtol(item.c_str(), &end, 10);
            check(!item.empty() && *end == '\0' && v >= 0 && (size_t)v < depth,
                  "inspect_init: --png-layers '{}': '{}' is not a layer in [0, {})", spec, item, depth);
            out.push_back((size_t)v);
            if (comma == std::string::npos) break;
            start = comma + 1;
        }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

static void write_pngs(const Args& a, const std::vector<LayerStats>& stats) {
    fs::create_directories(a.png_dir);
    for (size_t l : png_layer_list(a.png_layers, stats.size())) {
        auto name = [&](const char* what) { return fmt::format("{}/{}_layer{:02d}.png", a.png_dir, what, l); };
        float qs = robust_scale(stats[l].qk), vs = robust_scale(stats[l].vo);
        write_matrix_png(name("qk"), stats[l].qk, qs);
        write_matrix_png(name("vo"), stats[l].vo, vs);
        write_matrix_png(name("attn"), stats[l].attn, 0.f);
        std::fprintf(stderr, "png: %s (±%.3g), %s (±%.3g), %s\n", name("qk").c_str(), qs, name("vo").c_str(), vs,
                     name("attn").c_str());
    }
}

// ---------------------------------------------------------------------------------------------

static int run(const Args& a) {
    manual_seed(a.seed);
    std::unique_ptr<data::TextCorpus> text;
    if (!a.dataset.empty()) text = std::make_unique<data::TextCorpus>(load_text(a));
    Subject s = build(a, text.get());
    if (!a.png_dir.empty()) {
        try {
            png_layer_list(a.png_layers, (size_t)s.layers);
        } catch (const Error& e) {
            std::fprintf(stderr, "%s\n", e.what());
            return 2;
        }
    }
    make_inputs(a, text.get(), s);
    Tensor init_inputs = s.inputs;
    init::InitData data{[&] {
                            NoGrad ng;
                            if (s.vit) s.vit->forward(init_inputs);
                            else if (s.gau) s.gau->forward(init_inputs);
                            else s.lm->forward(init_inputs);
                        },
                        init_inputs.size(0)};
    data.labels = s.targets;  // the output-layer fit of relu-quantile and output-fit
    init::Report report = init::apply(*s.module, a.init, a.opt, &data);
    // A trained model: the same figures and pictures after training (the init still runs first,
    // so a data-dependent scheme's report is printed, then every tensor is replaced).
    if (!a.checkpoint.empty()) {
        try {
            nn::load_weights(a.checkpoint, *s.module);
        } catch (const Error& e) {
            std::fprintf(stderr, "inspect_init: --checkpoint %s: %s\n", a.checkpoint.c_str(), e.what());
            return 2;
        }
        report.say("weights replaced by the checkpoint " + a.checkpoint);
    }
    // Adam's first step moves every parameter by about its learning rate, whatever the gradient's
    // size, where the gradient is well above Adam's ε (train_lm's 1e-8; not train_vit's 1e-3
    // default: tools/adam_eps_share.py); random signs ask whether an update of that size alone, in
    // no particular direction, changes the figures (docs/RESULTS.md section 3).
    if (a.perturb > 0) {
        int64_t n = 0;
        for (Tensor& p : s.module->parameters()) {
            Tensor u = Tensor::uniform(p.shape());
            float* w = p.data_f32();
            const float* r = u.data_f32();
            for (int64_t i = 0; i < p.numel(); i++) w[i] += r[i] < 0.5f ? -a.perturb : a.perturb;
            n += p.numel();
        }
        report.say(fmt::format("every one of the {} parameters moved by ±{:g}, random signs", n, a.perturb));
    }
    // The initializers (and the checkpoint) ran on the CPU; the inspection runs on --device.
    s.module->to(a.dev);
    s.inputs = s.inputs.to(a.dev);
    s.targets = s.targets.to(a.dev);
    FILE* log = a.json_out ? stderr : stdout;
    std::fprintf(log, "inspect_init: %s, init %s, seed %llu, batch %lld %s\n", s.description.c_str(), a.init.c_str(),
                 (unsigned long long)a.seed, (long long)s.inputs.size(0), s.inputs_from.c_str());
    for (auto& line : report.lines) std::fprintf(log, "init: %s\n", line.c_str());
    for (auto& [k, v] : report.figures) std::fprintf(log, "figure: %s = %.6g\n", k.c_str(), v);

    ModelStats model;
    std::vector<LayerStats> stats = inspect(s, model);
    std::fprintf(log, "embedding: tok_cos %.4f, pos_share %.4f\n", model.embed_tok_cos, model.embed_pos_share);
    std::fprintf(log, "output: loss %.4f nats (%.4f bits)", model.loss, model.loss / std::log(2.0));
    if (!std::isnan(model.copy_top1)) std::fprintf(log, ", copy_top1 %.4f", model.copy_top1);
    std::fprintf(log, "\n");
    // The GAU has no W_q, W_k, W_v, softmax map or MLP: its rows have the scales, tok_cos and grad_cos only.
    bool attention = !s.gau;
    if (a.json_out) {
        for (size_t l = 0; l < stats.size(); l++) {
            auto& st = stats[l];
            json j = {{"layer", l}};
            if (attention)
                j.update({{"qk_diag_mean", st.qk_diag}, {"qk_offdiag_rms", st.qk_off}, {"vo_diag_mean", st.vo_diag},
                          {"vo_offdiag_rms", st.vo_off}, {"attn_self", st.attn_self},
                          {"attn_dist", st.attn_dist}, {"attn_dist_off", st.attn_dist_off},
                          {"mlp_hid_std", st.mlp_hid_std}, {"mlp_out_std", st.mlp_out_std}});
            j.update({{"act_std", st.act_std}, {"grad_std", st.grad_std}, {"tok_cos", st.tok_cos},
                      {"pos_share", st.pos_share}, {"grad_cos", st.grad_cos}});
            if (!st.grad_rank1.empty()) {
                json r;
                for (auto& [name, share] : st.grad_rank1) r[name] = share;
                j["grad_rank1"] = r;
            }
            std::printf("%s\n", j.dump().c_str());
        }
    } else {
        std::printf("\n%5s %13s %15s %13s %15s %10s %10s %14s %12s %12s %10s %11s %8s %9s %8s\n", "layer",
                    "qk_diag_mean", "qk_offdiag_rms", "vo_diag_mean", "vo_offdiag_rms", "attn_self", "attn_dist",
                    "attn_dist_off", "mlp_hid_std", "mlp_out_std", "act_std", "grad_std", "tok_cos", "pos_share",
                    "grad_cos");
        for (size_t l = 0; l < stats.size(); l++) {
            auto& st = stats[l];
            if (attention)
                std::printf("%5zu %13.4f %15.4f %13.4f %15.4f %10.4f %10.3f %14.3f %12.4f %12.4f", l, st.qk_diag,
                            st.qk_off, st.vo_diag, st.vo_off, st.attn_self, st.attn_dist, st.attn_dist_off,
                            st.mlp_hid_std, st.mlp_out_std);
            else
                std::printf("%5zu %13s %15s %13s %15s %10s %10s %14s %12s %12s", l, "-", "-", "-", "-", "-", "-", "-",
                            "-", "-");
            std::printf(" %10.4f %11.3e %8.4f %9.4f %8.4f\n", st.act_std, st.grad_std, st.tok_cos, st.pos_share,
                        st.grad_cos);
        }
    }
    std::fflush(stdout);
    if (!a.png_dir.empty()) write_pngs(a, stats);
    return 0;
}

// The first part of a "+"-composed --init that names no registered scheme ("" when all do), so a
// typo is a usage error (exit 2) before any work. init::apply checks again, with STD values.
static std::string unknown_scheme(const std::string& spec) {
    size_t start = 0;
    while (true) {
        size_t plus = spec.find('+', start);
        std::string part = spec.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
        part.erase(0, part.find_first_not_of(" \t"));
        part.erase(part.find_last_not_of(" \t") + 1);
        bool known = part == "normal" || part.rfind("normal:", 0) == 0;
        for (auto& s : init::schemes()) known = known || s.name == part;
        if (!known) return part.empty() ? "(empty)" : part;
        if (plus == std::string::npos) return "";
        start = plus + 1;
    }
}

int main(int argc, char** argv) {
    CLI::App app{"Inspect an initialization scheme per layer before training: W_qW_kᵀ and W_vW_proj diagonals, "
                 "attention, activation and gradient scales (see the header of apps/inspect_init.cpp)."};
    Args a;
    app.add_option("--model", a.model, "vit-tiny (192/12/3) | vit-small (384/12/6) on 32x32 | lm (TransformerLM "
                                       "384/12/8, vocab 50) | lm-small (128/4/4) | gau (train_lm's GAU LM, 128/4, "
                                       "Post-Norm)")
        ->capture_default_str()->check(CLI::IsMember({"vit-tiny", "vit-small", "lm", "lm-small", "gau"}));
    apps::add_init_flags(app, a.init, a.opt, " (LayerScale is a model option: --layerscale)");
    app.add_flag("--json", a.json_out, "one JSON object per layer per line on stdout (the text report goes to stderr)");
    app.add_option("--png", a.png_dir, "write W_qW_kᵀ, W_vW_proj and attention-map PNGs of a few layers to this "
                                       "folder (default: none)");
    app.add_option("--png-layers", a.png_layers, "comma-separated layers for --png (default: first, 1/3, 2/3, last)");
    app.add_option("--seed", a.seed, "random seed (model, inputs, init)")->capture_default_str();
    app.add_option("--batch", a.batch, "inputs in the batch (also the init batch of data-dependent schemes)")
        ->capture_default_str()->check(CLI::Range((int64_t)1, (int64_t)4096));
    app.add_option("--data-dir", a.data_dir, "ViT: CIFAR-10 (binary release folder, or an image folder such as "
                                             "../shared/data/cifar10-jpeg) instead of random N(0,1) images; LM: the "
                                             "folder of --dataset's files (default: INITLAB_DATA/<its folder>). "
                                             "Data-dependent schemes see the same batch");
    app.add_option("--dataset", a.dataset, "LM: windows of this corpus's validation split instead of random tokens "
                                           "(the vocabulary is built from its training split, as train_lm does)")
        ->check(CLI::IsMember(data::corpus_names()));
    app.add_option("--patch", a.patch, "ViT patch size")->capture_default_str()->check(apps::Positive);
    app.add_option("--pool", a.pool, "ViT pooling: avg (global average, what impulse needs) | cls")
        ->capture_default_str()->check(CLI::IsMember({"avg", "cls"}));
    app.add_flag("--fc-norm", a.fc_norm, "ViT with --pool avg: the final LayerNorm on the pooled vector (train_vit "
                                         "--fc-norm), not on each token");
    app.add_option("--pos", a.pos, "position embedding (default: sincos2d for ViT, sinusoidal for LM): "
                                   "sincos1d | sincos2d | learned (ViT); sinusoidal | learned | rope | none (LM)");
    app.add_option("--pe-scale", a.pe_scale, "multiplies the position embedding (ViT; LM sinusoidal or learned)")
        ->capture_default_str();
    app.add_flag("--pe-every-block", a.pe_every_block, "LM: the position embedding is added before every block");
    app.add_option("--emb-scale", a.emb_scale, "LM (transformer): multiplies the token embedding on the way in")
        ->capture_default_str();
    app.add_option("--dim", a.dim, "width (0: the preset's)")->capture_default_str()->check(apps::NonNegative);
    app.add_option("--heads", a.heads, "attention heads (0: the preset's)")->capture_default_str()
        ->check(apps::NonNegative);
    app.add_option("--checkpoint", a.checkpoint,
                   "inspect trained weights: a checkpoint of train_vit / train_lm (e.g. RUN/best.safetensors) "
                   "for the model these flags describe");
    app.add_option("--depth", a.depth, "blocks (0: the preset's)")->capture_default_str()
        ->check(CLI::Range((int64_t)0, (int64_t)64));
    app.add_option("--layerscale", a.layerscale, "LayerScale on both residual branches with this init (0: off)")
        ->capture_default_str();
    app.add_option("--seq-len", a.seq_len, "LM sequence length")->capture_default_str()
        ->check(CLI::Range((int64_t)2, (int64_t)4096));
    app.add_option("--perturb", a.perturb, "after the init (or --checkpoint), add ±EPS with random signs to every "
                                           "parameter: an update of Adam's first-step size in no particular direction")
        ->capture_default_str()->check(apps::NonNegative);
    app.add_option("--max-len", a.max_len, "LM: positions the position embedding holds, at least --seq-len (train_lm holds max(512, --seq-len))")
        ->capture_default_str()->check(CLI::Range((int64_t)2, (int64_t)65536));
    app.add_flag("--post-ln", a.post_ln, "LM: Post-LN blocks (default Pre-LN)");
    app.add_flag("--gau-pre-norm", a.gau_pre_norm, "GAU: Pre-Norm blocks (default Post-Norm, as train_lm)");
    app.add_option("--s", a.gau_s, "GAU: shared Q/K width s (train_lm's --s)")->capture_default_str()
        ->check(apps::Positive);
    app.add_flag("--untied", a.untied, "LM: an output layer of its own (train_lm --untied), not the embedding's");
    app.add_flag("--head-bias", a.head_bias, "transformer LM, with --untied: an output bias (train_lm --head-bias)");
    apps::add_device_flags(app, a.device, nullptr);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    bool vit = a.model.rfind("vit", 0) == 0;
    auto refuse = [](const std::string& msg) {
        std::fprintf(stderr, "inspect_init: %s\n", msg.c_str());
        return 2;
    };
    if (vit && !a.dataset.empty()) return refuse("--dataset is for the LMs; a ViT reads images from --data-dir");
    if (!vit && !a.data_dir.empty() && a.dataset.empty())
        return refuse("--data-dir for an LM needs --dataset (which corpus the folder holds)");
    if (vit && a.untied) return refuse("--untied is for the LMs");
    if (a.fc_norm && (!vit || a.pool != "avg")) return refuse("--fc-norm is for a ViT with --pool avg");
    if ((vit || a.model == "gau") && a.pe_every_block) return refuse("--pe-every-block is for the transformer LMs");
    if ((vit || a.model == "gau") && a.emb_scale != 1.f) return refuse("--emb-scale is for the transformer LMs");
    if (a.head_bias && (vit || a.model == "gau" || !a.untied))
        return refuse("--head-bias is for the transformer LMs with --untied");
    if (a.model == "gau") {
        if (a.post_ln) return refuse("--post-ln is for the transformer LMs: the GAU is Post-Norm unless --gau-pre-norm");
        if (a.heads > 0 || a.layerscale != 0.f || !a.pos.empty() || a.pe_scale != 1.f || !a.png_dir.empty())
            return refuse("--heads, --layerscale, --pos, --pe-scale and --png do not apply to the GAU (one head, "
                          "rotary embeddings, no softmax map)");
    } else if (a.gau_pre_norm) {
        return refuse("--gau-pre-norm is for --model gau");
    }
    if (!a.pos.empty()) {
        std::vector<std::string> ok = vit ? std::vector<std::string>{"sincos1d", "sincos2d", "learned"}
                                          : std::vector<std::string>{"sinusoidal", "learned", "rope", "none"};
        if (std::find(ok.begin(), ok.end(), a.pos) == ok.end())
            return refuse(fmt::format("--pos {} does not apply to {}", a.pos, a.model));
    }
    if (!vit && (a.pe_scale != 1.f || a.pe_every_block) && (a.pos == "rope" || a.pos == "none"))
        return refuse(fmt::format("--pe-scale and --pe-every-block need a position embedding (--pos is {})", a.pos));
    if (vit && 32 % a.patch != 0) return refuse(fmt::format("--patch {} does not divide 32", a.patch));
    apps::DeviceChoice dc = apps::resolve_device(a.device);
    if (!dc.error.empty()) return refuse(dc.error);
    a.dev = dc.device;
    std::string bad = unknown_scheme(a.init);
    if (!bad.empty()) {
        std::string valid;
        for (auto& s : init::schemes()) valid += (valid.empty() ? "" : ", ") + s.name;
        return refuse(fmt::format("--init {}: unknown scheme '{}' (valid: {}; compose with '+')", a.init, bad, valid));
    }
    try {
        return run(a);
    } catch (const Error& e) {
        std::fprintf(stderr, "inspect_init: %s\n", e.what());
        return 1;
    }
}
