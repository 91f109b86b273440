// tests/test_inspect_init.cpp: apps/inspect_init end to end: the per-layer JSON report, the
// --checkpoint path (figures of trained weights), tok_cos, pos_share, the LM's text input, and the
// usage errors.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include "engine/rng.h"
#include "init/init.h"
#include "nn/checkpoint.h"
#include "nn/gau.h"
#include "nn/transformer.h"
#include "test_data_helpers.h"

namespace {

// Runs apps/inspect_init with `args`; stdout to `out`, stderr to `err`; returns the exit status.
int inspect(const std::string& args, const std::string& out, const std::string& err) {
    REQUIRE(std::filesystem::exists("apps/inspect_init"));  // built by make, tests run from the root
    int rc = std::system(("apps/inspect_init " + args + " > " + out + " 2> " + err).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::vector<nlohmann::json> json_lines(const std::string& path) {
    std::vector<nlohmann::json> rows;
    std::ifstream f(path);
    for (std::string line; std::getline(f, line);)
        if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
    return rows;
}

std::string slurp_file(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// The ViT that `inspect_init --dim 32 --depth 2 --heads 2 --patch 4` builds.
const char* kSmallVit = "--dim 32 --depth 2 --heads 2 --patch 4 --batch 4";
nn::ViTConfig small_vit() {
    nn::ViTConfig c = nn::ViTConfig::tiny();
    c.dim = 32, c.depth = 2, c.heads = 2, c.patch = 4, c.pool = "avg", c.pos = "sincos2d";
    return c;
}

// That ViT under mimetic init, saved as dir/name.safetensors; returns the path.
std::string saved_mimetic_vit(const test::TempDir& dir, const std::string& name, uint64_t seed) {
    engine::manual_seed(seed);
    nn::ViT vit(small_vit());
    init::apply(vit, "mimetic", init::Options{}, nullptr);
    nn::save_checkpoint(dir / name, vit);
    return dir / (name + ".safetensors");
}

// The small Post-LN LM that `inspect_init --model lm-small` builds with kSmallLm, as train_lm would
// (max_len 512 whatever the sequence length, an untied head).
const char* kSmallLm = "--model lm-small --dim 32 --depth 3 --heads 2 --post-ln --untied --seq-len 16 --batch 4";

}  // namespace

TEST_CASE("inspect_init --json: one object per layer with the required figures; mimetic's signs", "[apps]") {
    test::TempDir dir;
    REQUIRE(inspect(std::string(kSmallVit) + " --init mimetic --json", dir / "out", dir / "err") == 0);
    auto rows = json_lines(dir / "out");
    REQUIRE(rows.size() == 2);
    for (size_t i = 0; i < rows.size(); i++) {
        for (const char* key : {"layer", "qk_diag_mean", "qk_offdiag_rms", "vo_diag_mean", "vo_offdiag_rms", "act_std",
                                "grad_std"})
            REQUIRE(rows[i].contains(key));
        CHECK(rows[i]["layer"] == (int)i);
        CHECK(rows[i]["qk_diag_mean"].get<double>() > 0.5);   // β₁ = 0.7 (plus the rank-k share)
        CHECK(rows[i]["vo_diag_mean"].get<double>() < -0.2);  // −β₂ = −0.4
    }
}

TEST_CASE("inspect_init mlp_hid_std, mlp_out_std: relu-quantile's scale makes the GELU's output std about 1",
          "[apps]") {
    test::TempDir dir;
    std::vector<double> hid[2], out[2];
    for (int scaled : {0, 1}) {
        std::string flags = std::string(kSmallVit) + " --init timm+relu-quantile --act-prob 0.5 --json" +
                            (scaled ? "" : " --no-rq-scale");
        REQUIRE(inspect(flags, dir / "out", dir / "err") == 0);
        for (auto& r : json_lines(dir / "out")) {
            hid[scaled].push_back(r["mlp_hid_std"].get<double>());
            out[scaled].push_back(r["mlp_out_std"].get<double>());
        }
    }
    REQUIRE(hid[0].size() == 2);
    for (int l = 0; l < 2; l++) {
        INFO("layer " << l);
        // Every unit's own std is 1 on this batch (the init's); the layer's adds the spread of the
        // units' means, small at act_prob 0.5.
        CHECK(hid[1][l] >= 1.0 - 1e-4);
        CHECK(hid[1][l] < 1.05);
        CHECK(hid[0][l] < 0.6 * hid[1][l]);  // the orthonormal fc1 unscaled: a quieter GELU
        CHECK(out[0][l] < 0.6 * out[1][l]);  // and a quieter branch (the same fc2)
        CHECK(out[0][l] > 0);
    }
}

TEST_CASE("inspect_init --checkpoint: the figures are those of the saved weights, not of --init", "[apps]") {
    test::TempDir dir;
    std::string mimetic = saved_mimetic_vit(dir, "mimetic", 3);

    REQUIRE(inspect(std::string(kSmallVit) + " --init timm --json", dir / "timm", dir / "err") == 0);
    REQUIRE(inspect(std::string(kSmallVit) + " --init timm --json --checkpoint " + mimetic,
                    dir / "loaded", dir / "err") == 0);
    auto timm = json_lines(dir / "timm"), loaded = json_lines(dir / "loaded");
    REQUIRE(timm.size() == 2);
    REQUIRE(loaded.size() == 2);
    for (int i = 0; i < 2; i++) {
        CHECK(std::abs(timm[i]["qk_diag_mean"].get<double>()) < 0.05);  // trunc-normal 0.02: no diagonal
        CHECK(loaded[i]["qk_diag_mean"].get<double>() > 0.5);
        CHECK(loaded[i]["vo_diag_mean"].get<double>() < -0.2);
    }
    CHECK(slurp_file(dir / "err").find("checkpoint") != std::string::npos);

    // A checkpoint of another shape is refused, naming the tensors that differ.
    CHECK(inspect("--dim 32 --depth 2 --heads 2 --patch 2 --batch 4 --checkpoint " + (dir / "mimetic"), dir / "out",
                  dir / "err") == 2);
    CHECK(slurp_file(dir / "err").find("patch_embed.weight") != std::string::npos);
    CHECK(inspect(std::string(kSmallVit) + " --checkpoint " + (dir / "missing"), dir / "out", dir / "err") == 2);
}

TEST_CASE("inspect_init tok_cos: 1 when every token is the same, below 1 for different tokens", "[apps]") {
    test::TempDir dir;
    // A corpus of one word: every input token is the same id, and without a position embedding
    // every token of a causal stack carries the same vector at every depth.
    std::string same;
    for (int i = 0; i < 200; i++) same += "the ";
    for (const char* split : {"train", "valid", "test"}) test::write_file(dir / (std::string(split) + ".txt"), same);
    std::string lm = std::string(kSmallLm) + " --json --dataset text --data-dir " + dir.path();
    REQUIRE(inspect(lm + " --pos none --init torch", dir / "out", dir / "err") == 0);
    auto rows = json_lines(dir / "out");
    REQUIRE(rows.size() == 3);
    for (auto& r : rows) CHECK(r["tok_cos"].get<double>() == Approx(1.0).margin(1e-4));
    // Nothing differs between windows or positions: no variance, pos_share 0.
    CHECK(slurp_file(dir / "err").find("embedding: tok_cos 1.0000, pos_share 0.0000") != std::string::npos);
    // Equal tokens give equal scores, so attention is uniform over the visible keys: mean distance
    // (T−1)/4 = 3.75 for T = 16, and mean over i ≥ 1 of (i+1)/2 = 4.5 without the own key.
    for (auto& r : rows) {
        CHECK(r["attn_dist"].get<double>() == Approx(3.75).margin(1e-4));
        CHECK(r["attn_dist_off"].get<double>() == Approx(4.5).margin(1e-4));
    }
    // Same vectors and same next token everywhere: the last block's gradient is the same for all
    // tokens. Below it, the causal attention's backward weighs later positions differently.
    CHECK(rows.back()["grad_cos"].get<double>() == Approx(1.0).margin(1e-4));
    // Every weight reads the same vector at every token, so its gradient Σ_t δ_t x_tᵀ = (Σ_t δ_t) xᵀ
    // is rank one.
    for (auto& r : rows) {
        REQUIRE(r["grad_rank1"].size() == 6);
        for (auto& [name, share] : r["grad_rank1"].items()) {
            INFO(name);
            CHECK(share.get<double>() == Approx(1.0).margin(1e-6));
        }
    }

    // The sinusoidal PE tells the positions apart: no longer 1, and never below −1/(T−1). Every
    // window is the same, so all of the variance left is the position's: pos_share 1.
    REQUIRE(inspect(lm + " --init torch", dir / "out", dir / "err") == 0);
    rows = json_lines(dir / "out");
    REQUIRE(rows.size() == 3);
    CHECK(slurp_file(dir / "err").find("pos_share 1.0000") != std::string::npos);
    for (auto& r : rows) {
        CHECK(r["pos_share"].get<double>() == Approx(1.0).margin(1e-6));
        CHECK(r["tok_cos"].get<double>() < 0.99);
        // −1/(T−1): bounds every mean of pairwise cosines meets (are the figures such means?).
        CHECK(r["tok_cos"].get<double>() >= -1.0 / 15 - 1e-6);
        CHECK(r["grad_cos"].get<double>() >= -1.0 / 15 - 1e-6);  // the next token is "the" everywhere: see below
    }
}

// The embedding's pos_share, from the report line "embedding: tok_cos X, pos_share Y".
static double embedding_pos_share(const std::string& err) {
    std::string text = slurp_file(err);
    size_t at = text.find("pos_share ");
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(at + 10));
}

TEST_CASE("inspect_init pos_share: the LM's position embedding grows with --pe-scale", "[apps]") {
    test::TempDir dir;
    std::string lm = "--model lm-small --dim 32 --depth 2 --heads 2 --seq-len 16 --batch 8 --init torch --json";
    REQUIRE(inspect(lm + " --pos none", dir / "out", dir / "none") == 0);
    REQUIRE(inspect(lm, dir / "out", dir / "one") == 0);
    REQUIRE(inspect(lm + " --pe-scale 3", dir / "out", dir / "three") == 0);
    // N(0, 1) token embeddings (variance 1 per channel) against the sinusoid's: less than its 1/2
    // per channel, since the low frequencies hardly change over 16 positions. Scale 3 multiplies
    // that variance by 9. Without a PE only the batch's 1/8 or so is left (0.12, 0.20, 0.56).
    double none = embedding_pos_share(dir / "none"), one = embedding_pos_share(dir / "one"),
           three = embedding_pos_share(dir / "three");
    INFO(none << " " << one << " " << three);
    CHECK(none < 0.25);
    CHECK(one > none);
    CHECK(three > one + 0.2);
    CHECK(slurp_file(dir / "three").find("sinusoidal × 3 PE") != std::string::npos);
    // Added again before block 2, the PE is a larger share of that block's output than of block 1's.
    auto once = json_lines(dir / "out");
    REQUIRE(inspect(lm + " --pe-scale 3 --pe-every-block", dir / "out", dir / "every") == 0);
    auto every = json_lines(dir / "out");
    REQUIRE(every.size() == 2);
    CHECK(every[0]["pos_share"] == once[0]["pos_share"]);
    CHECK(every[1]["pos_share"].get<double>() > once[1]["pos_share"].get<double>() + 0.02);
    CHECK(slurp_file(dir / "every").find("sinusoidal × 3 PE before every block") != std::string::npos);
    CHECK(inspect(lm + " --pos rope --pe-scale 2", dir / "out", dir / "err") == 2);
    CHECK(slurp_file(dir / "err").find("need a position embedding (--pos is rope)") != std::string::npos);
}

// A third of the token embedding is the PE times 3, divided by 3. The embedding's pos_share is a
// ratio, and block 1 reads a LayerNorm of the sum, so both are the same; but block 1 writes the same
// output onto a stream a third as large, so the stream is not a third of the other.
TEST_CASE("inspect_init --emb-scale: a third of the tokens is the PE times 3 up to the first residual add", "[apps]") {
    test::TempDir dir;
    std::string lm = "--model lm-small --dim 32 --depth 2 --heads 2 --seq-len 16 --batch 8 --init torch --json";
    REQUIRE(inspect(lm + " --pe-scale 3", dir / "pe", dir / "pe-err") == 0);
    REQUIRE(inspect(lm + " --emb-scale 0.333333", dir / "emb", dir / "emb-err") == 0);
    CHECK(embedding_pos_share(dir / "emb-err") == Approx(embedding_pos_share(dir / "pe-err")).margin(0.002));
    auto pe = json_lines(dir / "pe"), emb = json_lines(dir / "emb");
    REQUIRE(pe.size() == 2);
    REQUIRE(emb.size() == 2);
    CHECK(emb[0]["attn_dist"].get<double>() == Approx(pe[0]["attn_dist"].get<double>()).margin(1e-4));
    double ratio = pe[0]["act_std"].get<double>() / emb[0]["act_std"].get<double>();
    INFO("block 1 output std ratio " << ratio);
    CHECK(ratio > 2.0);
    CHECK(ratio < 2.95);
    CHECK(slurp_file(dir / "emb-err").find("token embedding × 0.333333") != std::string::npos);
    CHECK(inspect("--model vit-tiny --emb-scale 2", dir / "out", dir / "err") == 2);
    CHECK(slurp_file(dir / "err").find("--emb-scale is for the transformer LMs") != std::string::npos);
}

TEST_CASE("inspect_init attn_dist: mimetic's queries look at themselves, timm's everywhere", "[apps]") {
    test::TempDir dir;
    std::string lm = "--model lm-small --dim 32 --depth 2 --heads 2 --seq-len 16 --batch 4 --json";
    REQUIRE(inspect(lm + " --init timm", dir / "timm", dir / "err") == 0);
    REQUIRE(inspect(lm + " --init mimetic", dir / "mimetic", dir / "err") == 0);
    auto timm = json_lines(dir / "timm"), mimetic = json_lines(dir / "mimetic");
    REQUIRE(timm.size() == 2);
    REQUIRE(mimetic.size() == 2);
    for (size_t l = 0; l < 2; l++) {
        // trunc-normal(0.02) gives logits of about 1e-3: uniform causal attention, (T−1)/4.
        CHECK(timm[l]["attn_dist"].get<double>() == Approx(3.75).margin(0.05));
        // W_qW_kᵀ ≈ 0.7·I: most of each query's weight on its own key.
        CHECK(mimetic[l]["attn_self"].get<double>() > 0.5);
        CHECK(mimetic[l]["attn_dist"].get<double>() < 2.0);
    }
    // A ViT's distance is in patches: 0 ≤ distance ≤ the grid's diagonal (8×8 patches: 7√2).
    REQUIRE(inspect(std::string(kSmallVit) + " --init timm --json", dir / "vit", dir / "err") == 0);
    auto vit = json_lines(dir / "vit");
    REQUIRE(vit.size() == 2);  // a row per block
    for (auto& r : vit) {
        CHECK(r["attn_dist"].get<double>() > 1.0);
        CHECK(r["attn_dist"].get<double>() < 7 * std::sqrt(2.0));
    }
}

// The impulse fit sees LN(PE) alone; on images the patches blur its maps unless the PE dominates
// the token, as the sin-cos PE × 18 does (pos_share near 1). Both heads' filters are within one
// patch here, so the maps at × 18 are local and at × 1 they are not.
TEST_CASE("inspect_init: impulse3's maps follow the fitted filter when the PE is scaled up", "[apps]") {
    test::TempDir dir;
    std::string vit = std::string(kSmallVit) + " --init impulse3 --impulse-lr 1e-3 --impulse-iters 3000 --json";
    REQUIRE(inspect(vit, dir / "one", dir / "err") == 0);
    REQUIRE(inspect(vit + " --pe-scale 18", dir / "x18", dir / "err18") == 0);
    auto one = json_lines(dir / "one"), x18 = json_lines(dir / "x18");
    REQUIRE(one.size() == 2);
    REQUIRE(x18.size() == 2);
    for (size_t l = 0; l < 2; l++) {
        INFO("block " << l + 1 << ": " << one[l]["attn_dist"] << " at × 1, " << x18[l]["attn_dist"] << " at × 18");
        CHECK(x18[l]["attn_dist"].get<double>() < 2.0);
        CHECK(x18[l]["attn_dist"].get<double>() < one[l]["attn_dist"].get<double>() - 0.7);
    }
    CHECK(slurp_file(dir / "err18").find("sincos2d × 18 PE") != std::string::npos);
    CHECK(embedding_pos_share(dir / "err18") > 0.95);
}

TEST_CASE("inspect_init output: the batch's loss, and the tied N(0,1) embedding's copy prior", "[apps]") {
    test::TempDir dir;
    std::string lm = "--model lm-small --dim 32 --depth 2 --heads 2 --seq-len 16 --batch 4 --pos rope --json";
    // Reads "output: loss L nats (B bits), copy_top1 C" from the report.
    auto output = [&](const std::string& flags) {
        REQUIRE(inspect(lm + " " + flags, dir / "out", dir / "err") == 0);
        std::string err = slurp_file(dir / "err");
        size_t at = err.find("output: loss ");
        REQUIRE(at != std::string::npos);
        double loss = 0, bits = 0, copy = 0;
        REQUIRE(std::sscanf(err.c_str() + at, "output: loss %lf nats (%lf bits), copy_top1 %lf", &loss, &bits, &copy) ==
                3);
        CHECK(bits == Approx(loss / std::log(2.0)).epsilon(1e-3));
        return std::pair{loss, copy};
    };
    // The head scores each token against its own N(0, 1) embedding, |e|² ≈ 32: every position's
    // top logit is its input token, and the loss is many times ln 50.
    auto [tied_loss, tied_copy] = output("--init torch");
    CHECK(tied_copy > 0.9);
    CHECK(tied_loss > 10.0);
    auto [untied_loss, untied_copy] = output("--init torch --untied");
    CHECK(untied_copy < 0.5);
    CHECK(untied_loss < 6.0);
    // SmallInitEmb's tied U(±1e-4) head gives logits ≈ 0: the loss of the uniform guess, ln 50.
    CHECK(output("--init smallemb").first == Approx(std::log(50.0)).margin(1e-3));
}

TEST_CASE("inspect_init --dataset: windows of the validation split, train_lm's vocabulary and checkpoints", "[apps]") {
    test::TempDir dir;
    // Training split: 5 distinct words (+ <eos>); the validation split uses 2 of them.
    test::write_file(dir / "train.txt", "a b c d e\n");
    std::string valid;
    for (int i = 0; i < 40; i++) valid += "a b\n";
    test::write_file(dir / "valid.txt", valid);
    test::write_file(dir / "test.txt", "a\n");
    std::string lm = std::string(kSmallLm) + " --dataset text --data-dir " + dir.path();
    REQUIRE(inspect(lm + " --init mimetic", dir / "out", dir / "err") == 0);
    std::string report = slurp_file(dir / "out");
    CHECK(report.find("vocab 6") != std::string::npos);
    CHECK(report.find("untied") != std::string::npos);
    CHECK(report.find("validation split (" + (dir / "valid.txt") + ")") != std::string::npos);

    // A checkpoint of that model (max_len 512, as train_lm saves it) loads; a tied model does not.
    engine::manual_seed(5);
    nn::LMConfig c;
    c.vocab = 6, c.dim = 32, c.depth = 3, c.heads = 2, c.max_len = 512, c.tie_weights = false, c.pre_norm = false;
    nn::TransformerLM model(c);
    init::apply(model, "mimetic", init::Options{}, nullptr);
    nn::save_checkpoint(dir / "lm", model);
    REQUIRE(inspect(lm + " --init torch --json --checkpoint " + (dir / "lm"), dir / "out", dir / "err") == 0);
    auto rows = json_lines(dir / "out");
    REQUIRE(rows.size() == 3);
    for (auto& r : rows) CHECK(r["vo_diag_mean"].get<double>() < -0.2);
    // "a b <eos>" repeated: three different next tokens, so the last block's gradient points three
    // ways (near 1 only where every token has the same target, as in the tok_cos test).
    CHECK(rows.back()["grad_cos"].get<double>() < 0.9);
    REQUIRE(rows.back()["grad_rank1"].size() == 6);  // q, k, v, proj, fc1, fc2
    for (auto& [name, share] : rows.back()["grad_rank1"].items()) {
        INFO(name);
        CHECK(share.get<double>() < 0.95);
        CHECK(share.get<double>() > 0.0);
    }
    std::string tied = "--model lm-small --dim 32 --depth 3 --heads 2 --post-ln --seq-len 16 --batch 4 --dataset text "
                       "--data-dir " + dir.path();
    CHECK(inspect(tied + " --checkpoint " + (dir / "lm"), dir / "out", dir / "err") == 2);
    CHECK(slurp_file(dir / "err").find("head.weight") != std::string::npos);

    // A validation split shorter than one window is an error that names the file.
    test::write_file(dir / "valid.txt", "a b\n");
    CHECK(inspect(lm, dir / "out", dir / "err") == 1);
    CHECK(slurp_file(dir / "err").find(dir / "valid.txt") != std::string::npos);
    // A missing corpus names the folder; --dataset and --untied are not for a ViT; --data-dir
    // alone does not say which corpus an LM should read.
    CHECK(inspect(std::string(kSmallLm) + " --dataset ptb --data-dir " + (dir / "nowhere"), dir / "out", dir / "err") == 1);
    CHECK(slurp_file(dir / "err").find("nowhere") != std::string::npos);
    CHECK(inspect(std::string(kSmallVit) + " --dataset ptb", dir / "out", dir / "err") == 2);
    CHECK(inspect(std::string(kSmallVit) + " --untied", dir / "out", dir / "err") == 2);
    CHECK(inspect(std::string(kSmallLm) + " --data-dir " + dir.path(), dir / "out", dir / "err") == 2);
    CHECK(slurp_file(dir / "err").find("--dataset") != std::string::npos);
}

TEST_CASE("inspect_init --model gau: the scales and tok_cos of train_lm's GAU LM, and its checkpoints", "[apps]") {
    test::TempDir dir;
    const std::string gau = "--model gau --dim 32 --depth 3 --s 16 --untied --seq-len 16 --batch 4 --json";
    REQUIRE(inspect(gau + " --init torch", dir / "out", dir / "err") == 0);
    auto rows = json_lines(dir / "out");
    REQUIRE(rows.size() == 3);
    for (auto& r : rows) {
        CHECK(!r.contains("qk_diag_mean"));  // no W_q/W_k/W_v in a GAU
        CHECK(!r.contains("attn_self"));
        CHECK(r["act_std"].get<double>() == Approx(1.0).margin(0.01));  // Post-Norm: every output is LayerNormed
        CHECK(r["grad_std"].get<double>() > 0);
        CHECK(r["tok_cos"].get<double>() < 0.99);
    }
    CHECK(slurp_file(dir / "err").find("GAULM 32/3, s 16") != std::string::npos);

    // A GAU LM as train_lm --model gau --untied builds it, saved with zero output-layer weights:
    // loaded, the gradient at every layer's output is zero (the logits do not depend on it).
    engine::manual_seed(2);
    nn::GAUConfig c;
    c.vocab = 50, c.dim = 32, c.depth = 3, c.expansion = 64, c.s = 16, c.tie_weights = false;
    nn::GAULM model(c);
    std::fill_n(model.head->weight.data_f32(), model.head->weight.numel(), 0.f);
    nn::save_checkpoint(dir / "gau", model);
    REQUIRE(inspect(gau + " --checkpoint " + (dir / "gau"), dir / "out", dir / "err") == 0);
    rows = json_lines(dir / "out");
    REQUIRE(rows.size() == 3);
    for (auto& r : rows) CHECK(r["grad_std"].get<double>() == 0.0);
    CHECK(inspect("--model gau --dim 32 --depth 3 --s 8 --untied --checkpoint " + (dir / "gau"), dir / "out",
                  dir / "err") == 2);  // another s: the shapes differ

    // Transformer-only flags are refused for the GAU, and the GAU's for the others.
    CHECK(inspect(gau + " --post-ln", dir / "out", dir / "err") == 2);
    CHECK(inspect(gau + " --png " + (dir / "png"), dir / "out", dir / "err") == 2);
    CHECK(inspect(std::string(kSmallLm) + " --gau-pre-norm", dir / "out", dir / "err") == 2);
}

TEST_CASE("inspect_init --perturb: ±EPS on every parameter changes the figures; 0 changes nothing", "[apps]") {
    test::TempDir dir;
    std::string args = std::string(kSmallVit) + " --json --checkpoint " + saved_mimetic_vit(dir, "vit", 4);
    REQUIRE(inspect(args, dir / "plain", dir / "err") == 0);
    REQUIRE(inspect(args + " --perturb 0", dir / "zero", dir / "err") == 0);
    CHECK(slurp_file(dir / "zero") == slurp_file(dir / "plain"));
    REQUIRE(inspect(args + " --perturb 0.25", dir / "moved", dir / "err") == 0);
    CHECK(slurp_file(dir / "moved") != slurp_file(dir / "plain"));
    CHECK(slurp_file(dir / "err").find("parameters moved by ±0.25, random signs") != std::string::npos);
    // ±0.25 on every entry of W_q and W_k adds random off-diagonal mass to W_qW_kᵀ.
    auto plain = json_lines(dir / "plain"), moved = json_lines(dir / "moved");
    REQUIRE(moved.size() == plain.size());
    CHECK(moved[0]["qk_offdiag_rms"].get<double>() > plain[0]["qk_offdiag_rms"].get<double>());
    CHECK(inspect(args + " --perturb -1", dir / "out", dir / "err") == 2);
}

TEST_CASE("inspect_init --fc-norm: the ViT's norm after the mean, as train_vit --fc-norm builds it", "[apps]") {
    test::TempDir dir;
    // Reads the loss from "output: loss L nats" and checks the model line names the pooling.
    auto loss = [&](const std::string& flags, const char* pooling) {
        REQUIRE(inspect(std::string(kSmallVit) + " --init timm --json " + flags, dir / "out", dir / "err") == 0);
        std::string err = slurp_file(dir / "err");
        INFO(err);
        CHECK(err.find(pooling) != std::string::npos);
        size_t at = err.find("output: loss ");
        REQUIRE(at != std::string::npos);
        return std::stod(err.substr(at + 13));
    };
    // Same weights and images; a LayerNorm of the mean is not the mean of per-token LayerNorms.
    double per_token = loss("", "avg pooling"), fc_norm = loss("--fc-norm", "avg + fc-norm pooling");
    CHECK(std::fabs(per_token - fc_norm) > 1e-4);
    CHECK(inspect(std::string(kSmallVit) + " --pool cls --fc-norm", dir / "out", dir / "err") == 2);
    CHECK(slurp_file(dir / "err").find("--fc-norm") != std::string::npos);
    CHECK(inspect("--model lm-small --dim 32 --depth 2 --heads 2 --fc-norm", dir / "out", dir / "err") == 2);
}

TEST_CASE("inspect_init: unknown schemes and bad flags are usage errors", "[apps]") {
    test::TempDir dir;
    CHECK(inspect(std::string(kSmallVit) + " --init nonsense", dir / "out", dir / "err") == 2);
    CHECK(slurp_file(dir / "err").find("mimetic") != std::string::npos);  // the valid names are listed
    CHECK(inspect("--model vit-huge", dir / "out", dir / "err") == 2);
}
