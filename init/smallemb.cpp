// init/smallemb.cpp: SmallInitEmb (see init/smallemb.h).
#include "init/smallemb.h"

#include <cmath>

#include <fmt/format.h>
#include "engine/error.h"
#include "engine/ops.h"
#include "init/standard.h"
#include "nn/gau.h"
#include "nn/transformer.h"

namespace init {

namespace {

double rms(const engine::Tensor& t) {
    engine::NoGrad ng;
    return std::sqrt((double)engine::mean(engine::mul(t, t)).item());
}

}  // namespace

void smallemb_init(nn::Module& model, const Options&, const InitData*, Report& report) {
    std::string where;  // which LayerNorm follows the embedding
    nn::Embedding* emb = nullptr;
    bool tied = false;
    double pe_rms = 0;  // > 0: a fixed sinusoidal PE is added to the embedding
    if (auto* lm = dynamic_cast<nn::TransformerLM*>(&model)) {
        engine::check(lm->emb_norm || !lm->cfg.pre_norm,
                      "init: smallemb: this Pre-LN TransformerLM has no LayerNorm after the token embedding; build "
                      "it with LMConfig::emb_norm = true (train_lm and inspect_init do so when --init contains "
                      "smallemb)");
        where = lm->emb_norm ? "emb_norm" : "blocks.0.norm1 (Post-LN)";
        emb = lm->tok_emb.get();
        tied = !lm->head;
        if (lm->cfg.pos == "learned") {
            fill_value(lm->pos_embed, 0.f);
            where += "; learned position embedding set to 0";
        }
        if (lm->cfg.pos == "sinusoidal") pe_rms = rms(lm->pos_embed);
    } else if (auto* gau = dynamic_cast<nn::GAULM*>(&model)) {
        engine::check(gau->cfg.post_norm,
                      "init: smallemb: this Pre-Norm GAULM has no LayerNorm after the token embedding on the "
                      "residual stream; build it with post_norm = true");
        where = "norms.0 (Post-Norm)";
        emb = gau->tok_emb.get();
        tied = !gau->head;
    } else {
        engine::fail("init: smallemb: model {} has no token embedding followed by a LayerNorm (SmallInitEmb applies "
                     "to TransformerLM with emb_norm or Post-LN, and to Post-Norm GAULM)", model.type_name());
    }
    fill_uniform(emb->weight, -kSmallEmbBound, kSmallEmbBound);
    report.say(fmt::format("smallemb: token embedding [{}, {}] U(±1e-4), followed by {}{}", emb->num, emb->dim, where,
                           tied ? "; the output head is tied to it, so the first logits are ≈ 0" : ""));
    if (pe_rms > 0) {
        // BlinkDL's recipe pairs the tiny embedding with rotary PE or an absolute PE set to 0. A fixed sinusoidal PE
        // cannot be set to 0: it is added before the LayerNorm, which then normalizes mostly the position.
        double ratio = pe_rms / rms(emb->weight);
        report.figures["smallemb.pe_over_emb_rms"] = ratio;
        report.say(fmt::format("smallemb: the fixed sinusoidal position embedding (rms {:.2f}) is {:.0f}× the token "
                               "embedding in front of that LayerNorm, so at init its output carries the position and "
                               "hardly the token; the recipe uses rotary PE or a learned PE set to 0 (--pos rope or "
                               "learned)", pe_rms, ratio));
    }
}

}  // namespace init
