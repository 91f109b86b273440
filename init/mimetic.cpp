// init/mimetic.cpp: mimetic initialization of self-attention (formulas in init/mimetic.h).
#include "init/mimetic.h"

#include <cmath>
#include <fmt/format.h>
#include "engine/error.h"
#include "engine/linalg.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "init/standard.h"
#include "nn/transformer.h"

namespace init {

using engine::Tensor;

Tensor mimetic_noise(int64_t d, const std::string& kind) {
    engine::check(d > 0, "mimetic: width {} must be positive", d);
    float sd = 1.f / std::sqrt((float)d);
    if (kind == "normal") return Tensor::normal({d, d}, 0.f, sd);
    if (kind == "uniform") return Tensor::uniform({d, d}, -std::sqrt(3.f) * sd, std::sqrt(3.f) * sd);
    engine::fail("mimetic: noise '{}' (choose normal or uniform)", kind);
}

// A = alpha·Z + beta·I, then its SVD (computed in double by engine::svd).
static engine::SVD noisy_identity_svd(const Tensor& z, float alpha, float beta) {
    int64_t d = z.size(0);
    Tensor a = engine::mul(z, alpha);
    float* p = a.data_f32();
    for (int64_t i = 0; i < d; i++) p[i * d + i] += beta;
    return engine::svd(a);
}

// Writes rows j < rank of `left` = √S_j·U[:, j]ᵀ and of `right` = √S_j·Vt[j, :], i.e. the
// transposes of U[:, :rank]·S^½ and V[:, :rank]·S^½ (the PyTorch layout of two d→rank maps).
static void write_factors(const engine::SVD& f, int64_t rank, float* left, float* right) {
    int64_t d = f.U.size(0);
    const float *U = f.U.data_f32(), *S = f.S.data_f32(), *Vt = f.Vt.data_f32();
    for (int64_t j = 0; j < rank; j++) {
        float r = std::sqrt(S[j]);
        for (int64_t i = 0; i < d; i++) {
            left[j * d + i] = r * U[i * d + j];
            right[j * d + i] = r * Vt[j * d + i];
        }
    }
}

MimeticDraws mimetic_attention(nn::MultiHeadAttention& attn, const Options& opt) {
    engine::NoGrad ng;
    engine::check(attn.q->weight.device() == engine::Device::CPU,
                  "init: mimetic: attention weights are on {}; initialize the model on the CPU, then move it",
                  engine::device_name(attn.q->weight.device()));
    int64_t d = attn.dim, k = attn.head_dim;
    MimeticDraws draws;
    if (opt.mimetic_qk) {
        for (int64_t h = 0; h < attn.heads; h++) {
            Tensor z = mimetic_noise(d, opt.mimetic_noise);
            engine::SVD f = noisy_identity_svd(z, opt.mimetic_alpha1, opt.mimetic_beta1);
            // head_rows are views into q.weight / k.weight: W_q⁽ʰ⁾ᵀ and W_k⁽ʰ⁾ᵀ, [k, d] each.
            Tensor q_rows = attn.head_rows(attn.q->weight, h), k_rows = attn.head_rows(attn.k->weight, h);
            write_factors(f, k, q_rows.data_f32(), k_rows.data_f32());
            draws.z_qk.push_back(z);
        }
    }
    if (opt.mimetic_vo) {
        Tensor z = mimetic_noise(d, opt.mimetic_noise);
        engine::SVD f = noisy_identity_svd(z, opt.mimetic_alpha2, -opt.mimetic_beta2);
        // v.weight = W_vᵀ = S^½Uᵀ (what write_factors' left gives); proj.weight = W_projᵀ = V·S^½,
        // the transpose of write_factors' right.
        Tensor vt_rows = Tensor::empty({d, d});
        write_factors(f, d, attn.v->weight.data_f32(), vt_rows.data_f32());
        copy_into(attn.proj->weight, engine::transpose(vt_rows, 0, 1), "mimetic proj.weight");
        draws.z_vo = z;
    }
    return draws;
}

// Mean of the diagonal of Σ_h W_q⁽ʰ⁾W_k⁽ʰ⁾ᵀ = q.weightᵀ·k.weight and of W_vW_proj = v.weightᵀ·proj.weightᵀ.
static double qk_diag_mean(const nn::MultiHeadAttention& a) {
    int64_t d = a.dim;
    const float *q = a.q->weight.data_f32(), *k = a.k->weight.data_f32();
    double s = 0;
    for (int64_t r = 0; r < d; r++)
        for (int64_t i = 0; i < d; i++) s += (double)q[r * d + i] * k[r * d + i];
    return s / d;
}

static double vo_diag_mean(const nn::MultiHeadAttention& a) {
    int64_t d = a.dim;
    const float *v = a.v->weight.data_f32(), *p = a.proj->weight.data_f32();
    double s = 0;
    for (int64_t i = 0; i < d; i++)
        for (int64_t j = 0; j < d; j++) s += (double)v[j * d + i] * p[i * d + j];
    return s / d;
}

// Position-embedding caveats worth a line in the report (the paper assumes sinusoidal PE).
static std::string position_note(nn::Module& model) {
    std::string pos;
    if (auto* vit = dynamic_cast<nn::ViT*>(&model)) pos = vit->cfg.pos;
    else if (auto* lm = dynamic_cast<nn::TransformerLM*>(&model)) pos = lm->cfg.pos;
    if (pos == "learned" || pos == "none" || pos == "rope")
        return fmt::format("mimetic: note: {} uses '{}' position embeddings; the paper's attention-map structure "
                           "comes from sinusoidal ones", model.type_name(), pos);
    return "";
}

void mimetic_init(nn::Module& model, const Options& opt, const InitData*, Report& report) {
    std::vector<nn::MultiHeadAttention*> layers;
    model.visit([&](const std::string&, nn::Module& m) {
        if (auto* a = dynamic_cast<nn::MultiHeadAttention*>(&m)) layers.push_back(a);
    });
    engine::check(!layers.empty(),
                  "init: mimetic: model {} has no MultiHeadAttention layers (mimetic initializes self-attention: "
                  "use a ViT or a TransformerLM)", model.type_name());
    engine::check(opt.mimetic_qk || opt.mimetic_vo,
                  "init: mimetic: both mimetic_qk and mimetic_vo are off, so there is nothing to initialize");
    engine::check(opt.mimetic_noise == "normal" || opt.mimetic_noise == "uniform",
                  "init: mimetic: noise '{}' (choose normal or uniform)", opt.mimetic_noise);
    double qk = 0, vo = 0;
    for (auto* a : layers) {
        mimetic_attention(*a, opt);
        qk += qk_diag_mean(*a) / layers.size();
        vo += vo_diag_mean(*a) / layers.size();
    }
    std::string parts;
    if (opt.mimetic_qk)
        parts += fmt::format("W_qW_kᵀ = rank-{} part of {}·Z + {}·I per head", layers[0]->head_dim,
                             opt.mimetic_alpha1, opt.mimetic_beta1);
    if (opt.mimetic_vo)
        parts += fmt::format("{}W_vW_proj = {}·Z − {}·I per layer", parts.empty() ? "" : ", ", opt.mimetic_alpha2,
                             opt.mimetic_beta2);
    report.say(fmt::format("mimetic: {} attention layers × {} heads: {} ({} noise, variance 1/d); mean diagonal "
                           "W_qW_kᵀ {:+.3f}, W_vW_proj {:+.3f}",
                           layers.size(), layers[0]->heads, parts, opt.mimetic_noise, qk, vo));
    std::string note = position_note(model);
    if (!note.empty()) report.say(note);
    report.figures["mimetic.qk_diag_mean"] = qk;
    report.figures["mimetic.vo_diag_mean"] = vo;
}

}  // namespace init
