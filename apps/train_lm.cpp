// apps/train_lm.cpp: train a language model (causal transformer, GAU stack or LSTM) on PTB
// (word or char), WikiText-2/103 or a plain text corpus, with any initialization scheme.
//
//   ./apps/train_lm --model transformer --dataset ptb-char --init mimetic --epochs 1
//   ./apps/train_lm --model lstm --dataset ptb --preset small --opt sgd --lr 1 --schedule step
//
// Protocols: bptt (Zaremba et al.: contiguous rows, every position scored; the LSTM carries its
// state from batch to batch) and window (Bai et al.: windows of --seq-len tokens of which only the
// last --scored count). Reports perplexity (word level) or bits per character (char level: mean
// cross-entropy in nats / ln 2) on valid every epoch and on test at the end. Each evaluation of a
// transformer or GAU also reports tok_cos: how alike the tokens of one validation batch leave the
// last block (apps/common/token_similarity.h); 1.00 is a collapsed stack that can only predict the
// unigram distribution (docs/RESULTS.md section 3).
//
// Device: --device cuda (or auto, with a GPU): the model is built and initialized on the CPU
// (data-dependent schemes see their init batch there), then moved; each batch is copied to the
// device; the loss is read back where a metrics line is written, at the end of an epoch and at a
// stop (and the gradient norm every step when clipping). Checkpoints hold host copies.
//
// Stopping (Ctrl-C, SIGTERM) finishes the step, writes last.* and exits 130 / 143; --resume
// continues at the next batch of the same epoch, bit for bit as if never stopped. The batches of
// an epoch come in a fixed order, so the position is the batch index; the checkpoint also holds
// the dropout generator's offset, the epoch's running train loss, the plateau scheduler's state,
// and (bptt) the LSTM state carried into the next batch, in last.carry.safetensors.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <omp.h>
#include "apps/common/freeze.h"
#include "apps/common/lr_scale.h"
#include "apps/common/mfu.h"
#include "apps/common/profile_report.h"
#include "apps/common/run.h"
#include "apps/common/token_similarity.h"
#include "data/lm_batch.h"
#include "data/paths.h"
#include "data/text.h"
#include "engine/device.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "engine/profile.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "init/init.h"
#include "nn/checkpoint.h"
#include "nn/gau.h"
#include "nn/lstm.h"
#include "nn/graph_step.h"
#include "nn/optim.h"
#include "nn/transformer.h"

using namespace engine;
namespace fs = std::filesystem;

struct Args {
    std::string data_dir, dataset = "ptb-char", model = "transformer", level = "word", preset = "";
    int64_t dim = 256, depth = 4, heads = 4, s = 128, max_len = 512;
    std::string pos = "sinusoidal", act = "gelu";
    float pe_scale = 1.f, emb_scale = 1.f;
    bool pe_every_block = false;
    bool post_norm = false, gau_pre_norm = false, untied = false, head_bias = false;
    float dropout = 0.1f, emb_dropout = 0.f, word_dropout = 0.f;
    std::string init = "torch";
    init::Options init_opt;
    int64_t init_samples = 0;  // rows data-dependent inits see; 0: the first training batch
    std::string protocol = "bptt";
    int64_t batch_size = 32, seq_len = 128, scored = 64;
    int epochs = 10;
    float lr = 1e-3f, min_lr = 1e-5f, weight_decay = 0.01f, clip_grad = 0.25f, lr_decay = 0.5f;
    int warmup_steps = 0, decay_start = 4, plateau_patience = 0;
    std::string opt = "adamw", schedule = "cosine";
    std::string loss_scale = "mean";  // or "time-sum" (Zaremba et al.'s convention)
    int64_t max_steps = 0;  // stop an epoch early (quick runs); 0: whole epochs
    int64_t train_tokens = 0;  // train on the first N tokens of the training split; 0: all
    int64_t eval_every = 0;    // a validation evaluation every N steps inside an epoch; 0: at epoch ends only
    int64_t eval_tokens = 0;   // those mid-epoch evaluations read the first N validation tokens; 0: all
    apps::FreezeFlags freeze;  // --train-only, --freeze, --freeze-until (apps/common/freeze.h)
    std::string lr_scale;      // --lr-scale GLOB=FACTOR,... (apps/common/lr_scale.h)
    std::string init_from;     // a checkpoint whose weights replace the init's
    int threads = 0, log_every = 50;
    int profile_steps = 0;  // --profile N
    std::string cuda_graph = "on";
    uint64_t seed = 0;
    std::string out, device = "auto", precision = "fp32";
    bool resume = false, overwrite = false, auto_resume = false, nan_check = true, dry_run = false;
    bool eval_init = false;  // --eval-init: the validation split before the first step too
};

// One interface over the three model families: the mean cross-entropy of a batch's targets (the
// models' loss(): the output layer and the loss in one op, no logits kept), and the logits (for the
// initializers' batch). For the LSTM, carry = true starts from the state the previous batch left
// (BPTT). `train_loss` is training's: its state lives in buffers that stay (nn::CarriedState), so a
// CUDA graph can replay the step; `reset_state`, `carried` and `restore` are that state's (the
// LSTM's h and c per layer; nothing for the attention models), for epochs and mid-epoch
// checkpoints. `eval_loss` carries a state of its own, so an evaluation leaves training's alone.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
struct LM {
    std::shared_ptr<nn::Module> module;
    std::function<Tensor(const Tensor& ids)> forward;
    // The last block's output [B, T, dim], for the tok_cos of the evaluations (attention models;
    // null for the LSTM, which mixes no tokens by attention).
    std::function<Tensor(const Tensor& ids)> hidden;
    std::function<Tensor(const Tensor& ids, const Tensor& targets, bool carry)> train_loss, eval_loss;
    std::function<void()> reset_state = [] {};
    std::function<NamedTensors()> carried = [] { return NamedTensors{}; };
    std::function<void(const std::map<std::string, Tensor>&)> restore = [](const std::map<std::string, Tensor>&) {};
};

// Zaremba et al.'s LSTM sizes: --preset small | medium | large.
static nn::LSTMConfig preset_config(const std::string& preset) {
    return preset == "small" ? nn::LSTMConfig::small() : preset == "medium" ? nn::LSTMConfig::medium()
                                                                           : nn::LSTMConfig::large();
}

static LM build_model(const Args& a, int64_t vocab, Device dev) {
    LM lm;
    if (a.model == "lstm") {
        nn::LSTMConfig c = a.preset.empty() ? nn::LSTMConfig{vocab, a.dim, a.depth, a.dropout, false}
                                            : preset_config(a.preset);
        c.vocab = vocab;  // Zaremba et al.'s output layer is its own (never tied)
        auto m = std::make_shared<nn::LSTMLM>(c);
        auto carried = std::make_shared<nn::CarriedState>();
        auto eval_state = std::make_shared<std::vector<nn::LSTMState>>();
        lm.forward = [m](const Tensor& ids) {
            std::vector<nn::LSTMState> zeros;
            return m->forward(ids, zeros);
        };
        lm.train_loss = [m, carried](const Tensor& ids, const Tensor& targets, bool carry) {
            std::vector<nn::LSTMState> zeros;
            return carry ? carried->loss(*m, ids, targets) : m->loss(ids, targets, zeros);
        };
        lm.eval_loss = [m, eval_state](const Tensor& ids, const Tensor& targets, bool carry) {
            if (!carry) eval_state->clear();
            nn::LSTMLM::detach(*eval_state);
            return m->loss(ids, targets, *eval_state);
        };
        lm.reset_state = [carried] { carried->reset(); };
        lm.carried = [carried] {
            NamedTensors out;
            std::vector<nn::LSTMState> state = carried->get();
            for (size_t i = 0; i < state.size(); i++) {
                out.push_back({fmt::format("h.{}", i), state[i].h.to(Device::CPU)});
                out.push_back({fmt::format("c.{}", i), state[i].c.to(Device::CPU)});
            }
            return out;
        };
        // A state of every layer, [batch rows, hidden] each: anything else is not this run's.
        lm.restore = [carried, dev, c, rows = a.batch_size](const std::map<std::string, Tensor>& saved) {
            check(saved.size() == (size_t)(2 * c.layers), "it holds {} tensors, not h.i and c.i of {} layers",
                  saved.size(), c.layers);
            std::vector<nn::LSTMState> state;
            for (int64_t i = 0; i < c.layers; i++) {
                const std::string h = fmt::format("h.{}", i), cell = fmt::format("c.{}", i);
                check(saved.count(h) && saved.count(cell), "it has no {} or no {}", h, cell);
                for (const std::string& name : {h, cell})
                    check(saved.at(name).shape() == Shape({rows, c.hidden}), "{} is {}, not [{}, {}]", name,
                          saved.at(name).shape().str(), rows, c.hidden);
                state.push_back({saved.at(h).to(dev), saved.at(cell).to(dev)});
            }
            carried->set(state);
        };
        lm.module = m;
    } else if (a.model == "gau") {
        nn::GAUConfig c;
        c.vocab = vocab;
        c.dim = a.dim;
        c.depth = a.depth;
        c.expansion = 2 * a.dim;
        c.s = a.s;
        c.post_norm = !a.gau_pre_norm;
        c.tie_weights = !a.untied;
        c.dropout = a.dropout;
        auto m = std::make_shared<nn::GAULM>(c);
        lm.forward = [m](const Tensor& ids) { return m->forward(ids); };
        lm.hidden = [m](const Tensor& ids) { return m->trunk(ids); };
        lm.train_loss = lm.eval_loss = [m](const Tensor& ids, const Tensor& targets, bool) {
            return m->loss(ids, targets);
        };
        lm.module = m;
    } else {
        nn::LMConfig c;
        c.vocab = vocab;
        c.dim = a.dim;
        c.depth = a.depth;
        c.heads = a.heads;
        c.max_len = std::max(a.max_len, a.seq_len);
        c.pos = a.pos;
        c.pe_scale = a.pe_scale;
        c.emb_scale = a.emb_scale;
        c.pe_every_block = a.pe_every_block;
        c.pre_norm = !a.post_norm;
        c.tie_weights = !a.untied;
        c.head_bias = a.head_bias;
        c.emb_norm = a.init.find("smallemb") != std::string::npos && c.pre_norm;
        c.dropout = a.dropout;
        c.emb_dropout = a.emb_dropout;
        c.word_dropout = a.word_dropout;
        c.act = nn::parse_activation(a.act);
        auto m = std::make_shared<nn::TransformerLM>(c);
        lm.forward = [m](const Tensor& ids) { return m->forward(ids); };
        lm.hidden = [m](const Tensor& ids) { return m->trunk(ids); };
        lm.train_loss = lm.eval_loss = [m](const Tensor& ids, const Tensor& targets, bool) {
            return m->loss(ids, targets);
        };
        lm.module = m;
    }
    return lm;
}

// --dry-run builds the model without the data, with a stand-in vocabulary (the real one comes from
// the training split), runs --init on it (apps::dry_run_init), and checks the --freeze and
// --lr-scale patterns against its parameters.
static std::string dry_run_model(const Args& a) {
    const int64_t vocab = 64;
    LM lm = build_model(a, vocab, Device::CPU);
    Tensor ids = Tensor::randint({2, a.seq_len}, 0, (int32_t)vocab);
    init::InitData stand_in{[&lm, ids] { NoGrad ng; lm.forward(ids); }, 2, Tensor::randint({2, a.seq_len}, 0, vocab)};
    std::string init_line = apps::dry_run_init(*lm.module, a.init, a.init_opt, stand_in);
    apps::apply_freeze_flags(*lm.module, a.freeze, "train_lm");
    apps::apply_lr_scales(nn::param_groups(*lm.module, a.weight_decay), a.lr_scale, "train_lm");
    return fmt::format("{} builds ({} parameters with a stand-in vocabulary of {}: the real one comes from the "
                       "data); {}", a.model, lm.module->num_parameters(), vocab, init_line);
}

// Targets with the unscored (context) positions set to cross_entropy's ignore_index.
static Tensor scored_targets(const data::TokenBatch& b) {
    Tensor t = b.targets.clone();
    const float* w = b.weights.data_f32();
    for (int64_t i = 0; i < t.numel(); i++)
        if (w[i] == 0.f) t.data_i32()[i] = -100;
    return t;
}

struct Batches {
    std::unique_ptr<data::BpttBatches> bptt;
    std::unique_ptr<data::WindowBatches> window;
    int64_t size() const { return bptt ? bptt->size() : window->size(); }
    data::TokenBatch get(int64_t i) const { return bptt ? bptt->get(i) : window->get(i); }
};

static Batches make_batches(const Args& a, const std::vector<int32_t>& stream, int64_t batch) {
    Batches b;
    if (a.protocol == "bptt") b.bptt = std::make_unique<data::BpttBatches>(stream, batch, a.seq_len);
    else b.window = std::make_unique<data::WindowBatches>(stream, batch, a.seq_len, a.scored);
    return b;
}

// The mean negative log-likelihood (nats per scored token) over a split, and how many tokens it
// scored: the split cut into min(batch, 10) rows leaves a remainder out, and --protocol window
// scores the last --scored of each window only.
struct Eval {
    double loss = 0;
    int64_t scored = 0;
};

// The rows an evaluation cuts a split into (fewer than training's: a short split still gives batches).
static int64_t eval_rows(const Args& a) { return std::min<int64_t>(a.batch_size, 10); }

static Eval evaluate(LM& lm, const Args& a, const std::vector<int32_t>& stream, Device dev) {
    NoGrad ng;
    lm.module->eval();
    Batches batches = make_batches(a, stream, eval_rows(a));
    double nll = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < batches.size(); i++) {
        data::TokenBatch b = batches.get(i);
        Tensor loss = lm.eval_loss(b.inputs.to(dev), scored_targets(b).to(dev), a.protocol == "bptt" && i > 0);
        nll += loss.item() * (double)b.scored;
        count += b.scored;
    }
    lm.module->train();
    return {nll / std::max<double>(1.0, (double)count), count};
}

// The evaluation splits are cut into batches before training starts, as evaluate() cuts them, so
// that one too short for the flags is refused now, naming its file, not after an epoch's training.
static void check_eval_split(const Args& a, const std::vector<int32_t>& stream, const std::string& what) {
    const int64_t rows = eval_rows(a);
    auto refuse = [&](const std::string& why) {
        fail("{} ({} tokens) cannot be evaluated with --protocol {} --seq-len {}{} in {} rows: {}", what,
             stream.size(), a.protocol, a.seq_len, a.protocol == "window" ? fmt::format(" --scored {}", a.scored) : "",
             rows, why);
    };
    int64_t batches = 0;
    try {
        batches = make_batches(a, stream, rows).size();
    } catch (const engine::Error& e) {
        refuse(e.what());
    }
    if (batches == 0) refuse("it gives no batch");
}

static std::string tok_cos_text(double tok_cos) {
    return std::isfinite(tok_cos) ? fmt::format(", last block tok_cos {:.2f}", tok_cos) : "";
}

// How alike the tokens leave the last block (apps/common/token_similarity.h), on the first batch of
// `stream` as evaluate() reads it: 1.00 means the stack has collapsed and can only predict the
// unigram distribution. NaN for the LSTM.
static double last_block_tok_cos(LM& lm, const Args& a, const std::vector<int32_t>& stream, Device dev) {
    if (!lm.hidden) return std::nan("");
    NoGrad ng;
    lm.module->eval();
    Batches batches = make_batches(a, stream, eval_rows(a));
    double c = batches.size() > 0 ? apps::token_cosine(lm.hidden(batches.get(0).inputs.to(dev))) : std::nan("");
    lm.module->train();
    return c;
}

// `flag` (--resume, --init-from) reads a checkpoint whose token ids are those of `saved_path`.
static void check_same_vocab(const data::Vocab& saved, const data::Vocab& now, const std::string& saved_path,
                             const std::string& data_dir, const std::string& flag) {
    if (saved == now) return;
    int32_t i = 0;
    while (i < saved.size() && i < now.size() && saved.token(i) == now.token(i)) i++;
    auto at = [i](const data::Vocab& v) { return i < v.size() ? "'" + v.token(i) + "'" : std::string("none"); };
    fail("{}: the training split in {} gives another vocabulary than the run's {} ({} tokens here, {} there; "
         "id {} is {} there, {} here): the checkpoint's ids are that file's",
         flag, data_dir, saved_path, now.size(), saved.size(), i, at(saved), at(now));
}

// What data-dependent inits see: the first training batch, or --init-samples rows cut the way a
// batch of that many rows is (the first window of each of N equal slices of the split). Their
// forward pass makes the logits of every token (and relu-quantile's output-layer fit as many
// targets), so an init set whose logits would not fit in memory is refused, not swapped to death.
static data::TokenBatch init_set(const Args& a, const std::vector<int32_t>& train_stream, const Batches& train,
                                 int64_t vocab) {
    if (a.init_samples == 0) return train.get(0);
    const double cells = (double)a.init_samples * (double)a.seq_len * (double)vocab, max_cells = 1 << 28;
    if (cells > max_cells)
        fail("--init-samples {}: rows of {} tokens with a vocabulary of {} make {:.1f} GB of logits (at most {:.1f}); "
             "use fewer rows",
             a.init_samples, a.seq_len, vocab, 4e-9 * cells, 4e-9 * max_cells);
    try {
        return make_batches(a, train_stream, a.init_samples).get(0);
    } catch (const Error& e) {
        fail("--init-samples {}: {}", a.init_samples, e.what());
    }
}

static int run(Args& a, const apps::json& config, Device dev) {
    if (a.threads > 0) omp_set_num_threads(a.threads);
    manual_seed(a.seed);
    std::string dir = a.data_dir.empty() ? data::default_data_dir(a.dataset) : a.data_dir;
    if (dir.empty() || !fs::is_directory(dir)) {
        const std::string fetch = data::is_raw_wikitext(a.dataset)
                                      ? "unpack " + data::dataset_folder(a.dataset) + "-v1.zip of the WikiText release there"
                                      : "fetch it with: data/download.sh " + a.dataset;
        std::fprintf(stderr,
                     "train_lm: no %s data in '%s'. Pass --data-dir DIR, or set INITLAB_DATA to the folder that holds\n"
                     "%s/ (e.g. INITLAB_DATA=../shared/data), or %s\n",
                     a.dataset.c_str(), dir.c_str(), data::dataset_folder(a.dataset).c_str(), fetch.c_str());
        return 2;
    }
    data::CorpusOptions copt;
    copt.level = data::parse_level(a.level);
    data::TextCorpus corpus = data::load_corpus(a.dataset, dir, copt);
    bool char_level = corpus.level != data::TextLevel::Word;
    // A slice keeps the vocabulary of the whole training split, so valid and test read the same.
    size_t all_train = corpus.train.size();
    if (a.train_tokens > 0 && (size_t)a.train_tokens < all_train) corpus.train.resize(a.train_tokens);
    LM lm = build_model(a, corpus.vocab.size(), dev);
    std::printf("train_lm: %s, %lld parameters; %s: %zu / %zu / %zu tokens, vocabulary %d%s\n", a.model.c_str(),
                (long long)lm.module->num_parameters(), a.dataset.c_str(), corpus.train.size(), corpus.valid.size(),
                corpus.test.size(), corpus.vocab.size(),
                corpus.train.size() < all_train ? fmt::format(" (the first of {} training tokens)", all_train).c_str() : "");

    Batches train = make_batches(a, corpus.train, a.batch_size);
    check_eval_split(a, corpus.valid, "the validation split " + corpus.valid_file);
    check_eval_split(a, corpus.test, "the test split " + corpus.test_file);
    // The init set exists only for data-dependent schemes (the others never call its forward).
    init::InitData init_data;
    if (init::needs_data(a.init)) {
        data::TokenBatch rows = init_set(a, corpus.train, train, corpus.vocab.size());
        std::printf("init set: %lld rows of %lld tokens (%s)\n", (long long)rows.inputs.size(0),
                    (long long)rows.inputs.size(1),
                    a.init_samples > 0 ? "--init-samples, spread over the training split" : "the first training batch");
        // The next tokens are the labels of the output-layer fit (relu-quantile, output-fit; untied models).
        init_data = init::InitData{[&lm, inputs = rows.inputs] { NoGrad ng; lm.forward(inputs); }, rows.inputs.size(0),
                                   rows.targets};
    }
    init::Report report = init::apply(*lm.module, a.init, a.init_opt, &init_data);
    if (!a.init_from.empty()) {
        // The checkpoint's embedding rows are its run's token ids: that run's vocab.txt must be this one.
        const std::string saved = (fs::path(a.init_from).parent_path() / "vocab.txt").string();
        if (fs::exists(saved)) check_same_vocab(data::Vocab::load(saved), corpus.vocab, saved, dir, "--init-from");
        else
            std::fprintf(stderr, "train_lm: note: no vocab.txt beside %s: its token ids are taken to be this data's\n",
                         a.init_from.c_str());
    }
    apps::init_from_checkpoint(*lm.module, a.init_from, report);
    for (auto& line : report.lines) std::printf("init: %s\n", line.c_str());
    apps::FrozenByFlags frozen = apps::apply_freeze_flags(*lm.module, a.freeze, "train_lm");
    // The initializers ran on the CPU; the model moves now, before the optimizer makes its state.
    lm.module->to(dev);
    std::printf("device: %s\n", apps::part_device(config).c_str());

    auto groups = apps::apply_lr_scales(nn::param_groups(*lm.module, a.weight_decay), a.lr_scale, "train_lm");
    std::unique_ptr<nn::Optimizer> opt;
    if (a.opt == "adamw") opt = std::make_unique<nn::Adam>(groups, a.lr, 0.9f, 0.999f, 1e-8f, true);
    else opt = std::make_unique<nn::SGD>(groups, a.lr, 0.f, false);
    int64_t steps_per_epoch = a.max_steps > 0 ? std::min(a.max_steps, train.size()) : train.size();
    nn::WarmupCosine cosine{a.lr, a.min_lr, a.warmup_steps, a.epochs * steps_per_epoch};
    nn::StepDecay step_decay{a.lr, a.lr_decay, a.decay_start, 1};
    nn::ReduceOnPlateau plateau{a.lr, a.lr_decay, a.min_lr, 1e-4f, a.plateau_patience};

    apps::RunDir out(a.out, a.overwrite);
    // A resumed run's config.json (with this part added) is written once its checkpoint has loaded.
    if (!a.resume) out.write_json("config.json", config);
    if (!a.resume) apps::save_init_weights(out, *lm.module, a.init, a.init_from);
    // The checkpoint's token ids are the saved vocabulary's: the data a run continues on (--data-dir
    // may change between its parts) must give the same one, or every id would mean another token.
    if (a.resume && out.enabled() && fs::exists(out.path("vocab.txt")))
        check_same_vocab(data::Vocab::load(out.path("vocab.txt")), corpus.vocab, out.path("vocab.txt"), dir, "--resume");
    if (out.enabled()) corpus.vocab.save(out.path("vocab.txt"));
    int start_epoch = 0;
    int64_t skip_batches = 0, global_step = 0;
    double best_valid = INFINITY;
    double resumed_nll_sum = 0, resumed_tokens = 0;  // the interrupted epoch's running train loss
    double elapsed_before = 0;  // resumed: the seconds the run's earlier parts trained (metrics' elapsed_s)
    bool bptt = a.protocol == "bptt";
    if (a.resume) {
        check(out.enabled() && fs::exists(out.path("last.safetensors")), "--resume: no checkpoint {}",
              out.path("last.safetensors"));
        auto meta = nn::load_checkpoint(out.path("last"), *lm.module, opt.get());
        const std::string file = out.path("last.safetensors");
        // Checkpoints of older versions lack the mid-epoch keys: they restart their epoch.
        start_epoch = (int)nn::meta_int(meta, "epoch", file);
        skip_batches = nn::meta_int(meta, "batch_in_epoch", file, 0);
        global_step = nn::meta_int(meta, "step", file);
        best_valid = nn::meta_number(meta, "best_valid", file);
        resumed_nll_sum = nn::meta_number(meta, "epoch_nll_sum", file, 0);
        elapsed_before = nn::meta_number(meta, "elapsed_s", file, 0);
        resumed_tokens = nn::meta_number(meta, "epoch_tokens", file, 0);
        plateau.lr = opt->lr;
        plateau.best = (float)nn::meta_number(meta, "plateau_best", file, INFINITY);
        plateau.bad = (int)nn::meta_int(meta, "plateau_bad", file, 0);
        global_generator().manual_seed(a.seed);
        global_generator().advance((uint64_t)nn::meta_int(meta, "rng_offset", file));
        if (meta.count("carried_state") && meta.at("carried_state") == "1") {
            std::map<std::string, std::string> carry_meta;
            auto state = engine::load_safetensors(out.path("last.carry.safetensors"), &carry_meta);
            // Written just before last.safetensors: a crash between the two leaves another step's state.
            check(carry_meta["step"] == meta.at("step"), "--resume: {} is from step {}, the checkpoint from step {}",
                  out.path("last.carry.safetensors"), carry_meta["step"], meta.at("step"));
            try {
                lm.restore(state);
            } catch (const engine::Error& e) {
                fail("--resume: {}: {}", out.path("last.carry.safetensors"), e.what());
            }
        }
        out.trim_metrics(global_step);  // (after every check: a refused resume changes nothing)
        std::printf("resumed from %s: epoch %d, batch %lld, step %lld\n", out.path("last").c_str(), start_epoch + 1,
                    (long long)skip_batches, (long long)global_step);
        out.write_json("config.json", config);
    }
    // The metrics' elapsed_s goes on from where the checkpoint's part left it, so that a resumed run's
    // time axis does not start again at 0.
    auto started = std::chrono::steady_clock::now();
    auto elapsed_s = [&] {
        return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    };
    // `batch_in_epoch`: the batches of `epoch` already trained on. Mid-epoch a BPTT model's
    // carried state belongs to the position too.
    auto checkpoint = [&](const std::string& name, int epoch, int64_t batch_in_epoch, double nll_sum, double tokens) {
        if (!out.enabled()) return true;
        if (!apps::weights_finite_for_checkpoint("train_lm", *lm.module, name, epoch + (batch_in_epoch > 0),
                                                 global_step, out, a.nan_check))
            return false;
        NamedTensors state = batch_in_epoch > 0 && bptt ? lm.carried() : NamedTensors{};
        if (!state.empty())
            engine::save_safetensors(out.path(name + ".carry.safetensors"), state,
                                     {{"step", std::to_string(global_step)}});
        nn::save_checkpoint(out.path(name), *lm.module, opt.get(),
                            {{"epoch", std::to_string(epoch)}, {"batch_in_epoch", std::to_string(batch_in_epoch)},
                             {"step", std::to_string(global_step)}, {"best_valid", fmt::format("{}", best_valid)},
                             {"epoch_nll_sum", fmt::format("{}", nll_sum)}, {"epoch_tokens", fmt::format("{}", tokens)},
                             {"elapsed_s", fmt::format("{}", elapsed_s())},
                             {"plateau_best", fmt::format("{}", plateau.best)},
                             {"plateau_bad", std::to_string(plateau.bad)},
                             {"carried_state", state.empty() ? "0" : "1"},
                             {"rng_offset", std::to_string(global_generator().offset())}, {"init", a.init}});
        return true;
    };
    auto metric = [&](double nll) { return char_level ? nll / std::log(2.0) : std::exp(nll); };
    const char* metric_name = char_level ? "bpc" : "ppl";

    // Mid-epoch evaluations (--eval-every) read a prefix of the validation split, so that a
    // short run's curve has points without the whole split's cost at each of them.
    std::vector<int32_t> valid_prefix = corpus.valid;
    if (a.eval_tokens > 0 && (size_t)a.eval_tokens < valid_prefix.size()) valid_prefix.resize(a.eval_tokens);
    if (a.eval_every > 0 && valid_prefix.size() < corpus.valid.size())
        check_eval_split(a, valid_prefix, fmt::format("--eval-tokens {}: the validation prefix", a.eval_tokens));
    // An evaluation line of metrics.jsonl: `m` (kind, step, epoch, ...) and the validation figures;
    // tok_cos only where the model has one (not the LSTM: NaN).
    auto append_eval = [&](apps::json m, const Eval& valid, double tok_cos) {
        m["valid_" + std::string(metric_name)] = metric(valid.loss);
        m["valid_loss"] = valid.loss;
        m["valid_tokens"] = valid.scored;  // scored
        m["elapsed_s"] = elapsed_s();
        if (std::isfinite(tok_cos)) m["tok_cos"] = tok_cos;
        out.append_metrics(m);
    };
    auto mid_epoch_eval = [&](double epoch_at) {
        Eval valid = evaluate(lm, a, valid_prefix, dev);  // training's LSTM state is left as it is
        double tok_cos = last_block_tok_cos(lm, a, valid_prefix, dev);
        std::printf("step %lld: valid %s %.4f (%lld tokens scored)%s\n", (long long)global_step, metric_name,
                    metric(valid.loss), (long long)valid.scored, tok_cos_text(tok_cos).c_str());
        append_eval({{"kind", "eval"}, {"step", global_step}, {"epoch", epoch_at}}, valid, tok_cos);
    };

    apps::install_stop_handlers();
    auto params = lm.module->parameters();
    apps::ProfileWindow prof(a.profile_steps, dev);
    apps::StepFlops step_flops(dev, a.precision);  // GEMM FLOPs of a step, for the MFU figure
    // --cuda-graph: batches of the first batch's shape go through a captured step (nn/graph_step.h)
    // reading x_in, y_in (and --loss-scale time-sum's factor, scale_in), refilled from each batch;
    // others (a shorter last BPTT batch) run eagerly, with the gradients zeroed in place (the graph
    // holds their addresses). The LSTM's carried state stays in place too (nn::CarriedState). Not for
    // word dropout (drawn on the host), under --profile (it times ops one by one), or with
    // --freeze-until (the trained parameters change, and their update counts differ).
    bool use_graph = apps::cuda_graph_applies(a.cuda_graph, dev) && a.profile_steps == 0 && a.word_dropout == 0.f &&
                     a.freeze.until == 0;
    // time-sum: the loss summed over a row's scored positions and averaged over the rows, the scale
    // Zaremba et al.'s lr 1 and clip 5 were chosen for (mean loss × scored per row).
    const bool time_sum = a.loss_scale == "time-sum";
    auto time_sum_factor = [](const data::TokenBatch& b) { return (float)((double)b.scored / (double)b.inputs.size(0)); };
    Tensor x_in, y_in, scale_in;
    std::unique_ptr<nn::GraphStep> graph_step;
    bool graph_noted = false;
    // --eval-init: what the init alone scores (a fresh run only: a resumed one has the line already).
    if (a.eval_init && !a.resume) {
        Eval valid = evaluate(lm, a, corpus.valid, dev);
        double tok_cos = last_block_tok_cos(lm, a, corpus.valid, dev);
        std::printf("init: valid %s %.4f (before the first step)%s\n", metric_name, metric(valid.loss),
                    tok_cos_text(tok_cos).c_str());
        append_eval({{"kind", "eval"}, {"step", 0}, {"epoch", 0}}, valid, tok_cos);
        if (a.nan_check && !std::isfinite(valid.loss)) {
            apps::report_nan_loss("train_lm", (float)valid.loss, 0, 0, out, "valid loss at init");
            return 1;
        }
    }
    for (int epoch = start_epoch; epoch < a.epochs; epoch++) {
        if (a.schedule == "step") opt->lr = step_decay.lr(epoch);
        if (skip_batches == 0) lm.reset_state();  // else: resumed mid-epoch, with the restored state
        apps::Progress bar(fmt::format("epoch {}/{}", epoch + 1, a.epochs), steps_per_epoch, "tok");
        apps::LossMeter meter(dev == Device::CUDA, resumed_nll_sum, resumed_tokens);
        double ntok = resumed_tokens;  // tokens trained on this epoch (the meter may not have read them all yet)
        for (int64_t i = skip_batches; i < steps_per_epoch; i++) {
            frozen.unfreeze_when_due(global_step, "train_lm");
            prof.begin();
            data::TokenBatch b = train.get(i);
            bool log_now = (global_step + 1) % a.log_every == 0;
            if (log_now) apps::wait_for_device(dev);  // the logged time is this step's alone
            auto t0 = std::chrono::steady_clock::now();
            step_flops.begin();
            if (a.schedule == "cosine") opt->lr = cosine.lr(global_step);
            bool graph = use_graph && (!x_in.defined() || b.inputs.shape() == x_in.shape());
            Tensor loss;
            float gnorm = 0.f;
            if (graph) {
                if (!graph_step) {  // the first batch's tensors become the step's inputs
                    x_in = b.inputs.to(dev);
                    y_in = scored_targets(b).to(dev);
                    if (time_sum) scale_in = Tensor::zeros(Shape{}, DType::F32, dev);
                    graph_step = std::make_unique<nn::GraphStep>(
                        *opt, [&] { return lm.train_loss(x_in, y_in, bptt); },
                        a.clip_grad > 0 ? params : std::vector<Tensor>{}, a.clip_grad, scale_in);
                } else {
                    nn::copy_into(x_in, b.inputs);
                    nn::copy_into(y_in, scored_targets(b));
                }
                if (time_sum) nn::copy_into(scale_in, Tensor::full(Shape{}, time_sum_factor(b)));
                loss = graph_step->run();
                if (graph_step->captured() && !std::exchange(graph_noted, true))
                    std::fprintf(stderr, "train_lm: --cuda-graph: step %lld captured into a CUDA graph; batches of its shape replay it\n",
                                 (long long)global_step + 1);
                if (log_now) gnorm = a.clip_grad > 0 ? graph_step->grad_norm().item() : nn::grad_norm(params);
            } else {
                if (use_graph) opt->zero_grad_in_place();
                else opt->zero_grad();
                profile::boundary("batch, zero_grad", profile::Phase::Outside);
                loss = lm.train_loss(b.inputs.to(dev), scored_targets(b).to(dev), bptt);
            }
            meter.add(loss, (double)b.scored);
            float lv = 0.f;
            if (!meter.deferred() || log_now) {
                lv = meter.read();
                if (a.nan_check && (!std::isfinite(lv) || !std::isfinite(meter.sum()))) {
                    apps::report_nan_loss("train_lm", lv, epoch + 1, global_step, out);
                    return 1;
                }
            }
            profile::boundary("loss read-back", profile::Phase::Outside);
            if (!graph)
                gnorm = apps::backward_and_update(time_sum ? mul(loss, time_sum_factor(b)) : loss, params, *opt,
                                                  a.clip_grad, log_now);
            global_step++;
            if (log_now) apps::wait_for_device(dev);  // the logged time includes the step's last kernels
            double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            ntok += (double)b.scored;
            bar.update(i + 1, (int64_t)ntok, fmt::format("{} {:.3f}", metric_name, metric(meter.mean())));
            if (log_now) {
                apps::json line = apps::train_metrics(global_step, epoch + (i + 1.0) / steps_per_epoch, opt->lr, lv, gnorm,
                                                      ms, (double)b.scored, dev, step_flops);
                line["elapsed_s"] = elapsed_s();
                out.append_metrics(line);
            }
            prof.end();
            if (const profile::Report* r = prof.finished()) apps::report_profile(*r, "train_lm --profile", out);
            if (a.eval_every > 0 && global_step % a.eval_every == 0 && i + 1 < steps_per_epoch)
                mid_epoch_eval(epoch + (i + 1.0) / steps_per_epoch);
            if (apps::stop_requested()) {
                bar.finish();
                if (!apps::epoch_loss_finite("train_lm", meter, a.nan_check, epoch + 1, global_step, out)) return 1;
                if (!checkpoint("last", epoch, i + 1, meter.sum(), meter.weight())) return 1;
                return apps::report_stop("train_lm", epoch + 1, i + 1, out);
            }
        }
        bar.finish();
        if (!apps::epoch_loss_finite("train_lm", meter, a.nan_check, epoch + 1, global_step, out)) return 1;
        double nll_sum = meter.sum(), tokens = meter.weight();
        skip_batches = 0;
        resumed_nll_sum = resumed_tokens = 0;
        Eval valid = evaluate(lm, a, corpus.valid, dev);
        double tok_cos = last_block_tok_cos(lm, a, corpus.valid, dev);
        if (a.schedule == "plateau") opt->lr = plateau.update((float)valid.loss);
        std::printf("epoch %d: train %s %.4f, valid %s %.4f, lr %.3g%s\n", epoch + 1, metric_name,
                    metric(nll_sum / std::max(1.0, tokens)), metric_name, metric(valid.loss), opt->lr,
                    tok_cos_text(tok_cos).c_str());
        append_eval({{"kind", "eval"}, {"step", global_step}, {"epoch", epoch + 1},
                     {"train_" + std::string(metric_name), metric(nll_sum / std::max(1.0, tokens))}},
                    valid, tok_cos);
        if (a.nan_check && !std::isfinite(valid.loss)) {
            apps::report_nan_loss("train_lm", (float)valid.loss, epoch + 1, global_step, out, "valid loss");
            return 1;
        }
        if (valid.loss < best_valid) {
            best_valid = valid.loss;
            if (!checkpoint("best", epoch + 1, 0, 0, 0)) return 1;
        }
        if (!checkpoint("last", epoch + 1, 0, 0, 0)) return 1;
    }
    Eval test = evaluate(lm, a, corpus.test, dev);
    std::printf("test %s %.4f (valid best %.4f)\n", metric_name, metric(test.loss), metric(best_valid));
    apps::json result = {{"test_" + std::string(metric_name), metric(test.loss)}, {"test_loss", test.loss},
                         {"test_tokens", test.scored},
                         {"best_valid_" + std::string(metric_name), metric(best_valid)},
                         {"epochs", a.epochs}, {"steps", global_step}, {"train_tokens", corpus.train.size()},
                         {"init", a.init},
                         {"init_report", report.figures}, {"finished", apps::now_iso8601()}};
    if (apps::json at_init = out.init_eval(); !at_init.is_null()) {
        const std::string valid_metric = "valid_" + std::string(metric_name);
        result["init_eval"] = {{valid_metric, at_init[valid_metric]}, {"valid_loss", at_init["valid_loss"]}};
    }
    out.write_json("result.json", result);
    return 0;
}

int main(int argc, char** argv) {
    CLI::App app{"Train a language model (transformer, GAU or LSTM) with any initialization scheme."};
    Args a;
    app.add_option("--data-dir", a.data_dir, "data folder (default: $INITLAB_DATA/<dataset folder>, else data_local/)");
    app.add_option("--dataset", a.dataset,
                   "ptb | ptb-char | wikitext2 | wikitext103 | wikitext2-raw | wikitext103-raw (the untokenized "
                   "wiki.*.raw, at char or byte level) | text")
        ->capture_default_str()
        ->check(CLI::IsMember(data::corpus_names()));
    app.add_option("--level", a.level,
                   "tokens of --dataset text: word | symbols | char | byte; of wikitext*-raw: char (its default) | byte")
        ->capture_default_str()->check(CLI::IsMember({"word", "symbols", "char", "byte"}));
    app.add_option("--model", a.model, "transformer | gau | lstm")->capture_default_str()
        ->check(CLI::IsMember({"transformer", "gau", "lstm"}));
    app.add_option("--preset", a.preset, "lstm: small | medium | large (Zaremba et al.)")
        ->check(CLI::IsMember({"", "small", "medium", "large"}));
    app.add_option("--dim", a.dim, "width (LSTM units)")->capture_default_str()->check(apps::Positive);
    app.add_option("--depth", a.depth, "blocks (LSTM layers)")->capture_default_str()->check(apps::Positive);
    app.add_option("--heads", a.heads, "attention heads (transformer)")->capture_default_str()
        ->check(apps::Positive);
    app.add_option("--s", a.s, "GAU shared Q/K width s")->capture_default_str()->check(apps::Positive);
    app.add_option("--pos", a.pos, "transformer position embedding: sinusoidal | learned | rope | none")
        ->capture_default_str()->check(CLI::IsMember({"sinusoidal", "learned", "rope", "none"}));
    app.add_option("--pe-scale", a.pe_scale, "transformer: multiplies the sinusoidal or learned position embedding "
                                             "(the sinusoidal one has rms 0.71 at scale 1)")
        ->capture_default_str();
    app.add_option("--emb-scale", a.emb_scale, "transformer: multiplies the token embedding on the way in, not in the "
                                               "tied output layer (Vaswani et al.: sqrt(dim))")
        ->capture_default_str();
    app.add_flag("--pe-every-block", a.pe_every_block,
                 "transformer: add the sinusoidal or learned position embedding before every block, not only "
                 "to the embedding");
    app.add_flag("--post-norm", a.post_norm, "transformer: Post-LN blocks (default Pre-LN)");
    apps::add_act_flag(app, a.act, "transformer");
    app.add_flag("--gau-pre-norm", a.gau_pre_norm, "GAU: Pre-Norm blocks (default Post-Norm, as FLASH/GAU-α)");
    app.add_flag("--untied", a.untied, "do not tie the output layer to the embedding");
    app.add_flag("--head-bias", a.head_bias, "transformer, with --untied: give the output layer a bias, so the unigram "
                                             "distribution needs no direction shared by every token");
    app.add_option("--dropout", a.dropout, "dropout")->capture_default_str()->check(CLI::Range(0.f, 0.99f));
    app.add_option("--emb-dropout", a.emb_dropout, "dropout on the embedding output")->capture_default_str()
        ->check(CLI::Range(0.f, 0.99f));
    app.add_option("--word-dropout", a.word_dropout, "drop whole words from the embedding table")->capture_default_str()
        ->check(CLI::Range(0.f, 0.99f));
    apps::add_init_flags(app, a.init, a.init_opt);
    app.add_option("--init-samples", a.init_samples,
                   "rows of --seq-len tokens data-dependent inits (lsuv, relu-quantile, output-fit, attn-logits) see, cut as a "
                   "batch of that many rows is (Aguirre & Fuentes use 2048 samples); 0: the first training batch")
        ->capture_default_str()->check(apps::NonNegative);
    apps::add_init_from_flag(app, a.init_from);
    app.add_option("--protocol", a.protocol, "bptt | window")->capture_default_str()
        ->check(CLI::IsMember({"bptt", "window"}));
    app.add_option("--batch-size", a.batch_size, "batch size (rows)")->capture_default_str()
        ->check(apps::Positive);
    app.add_option("--seq-len", a.seq_len, "tokens per row and batch (bptt steps, or window length)")
        ->capture_default_str()->check(apps::Positive);
    app.add_option("--scored", a.scored, "window protocol: scored positions at the end of each window")
        ->capture_default_str()->check(apps::Positive);
    app.add_option("--epochs", a.epochs, "epochs")->capture_default_str()->check(apps::Positive);
    app.add_option("--max-steps", a.max_steps, "at most N steps per epoch, the epoch's first N batches (0: whole epochs)")
        ->capture_default_str()->check(apps::NonNegative);
    app.add_option("--eval-every", a.eval_every,
                   "also evaluate on the validation split every N steps inside an epoch (a curve for a run of one "
                   "long epoch; 0: at the end of each epoch only)")
        ->capture_default_str()->check(apps::NonNegative);
    app.add_flag("--eval-init", a.eval_init,
                 "evaluate the whole validation split before the first step too (metrics.jsonl: an eval line at step "
                 "0, epoch 0; result.json: init_eval)");
    app.add_option("--eval-tokens", a.eval_tokens,
                   "--eval-every's evaluations read only the first N validation tokens (0: all); the end-of-epoch "
                   "evaluation always reads the whole split")
        ->capture_default_str()->check(apps::NonNegative);
    app.add_option("--train-tokens", a.train_tokens,
                   "train on the first N tokens of the training split (0 or more than the split: all of it); "
                   "the vocabulary still comes from the whole split")
        ->capture_default_str()->check(apps::NonNegative);
    app.add_option("--opt", a.opt, "adamw | sgd")->capture_default_str()->check(CLI::IsMember({"adamw", "sgd"}));
    app.add_option("--lr", a.lr, "learning rate")->capture_default_str()->check(apps::Positive);
    app.add_option("--min-lr", a.min_lr, "cosine: final learning rate; plateau: the lowest it decays to")
        ->capture_default_str()->check(apps::NonNegative);
    app.add_option("--warmup-steps", a.warmup_steps, "cosine: linear warmup steps")->capture_default_str()
        ->check(apps::NonNegative);
    app.add_option("--schedule", a.schedule, "cosine | step (×--lr-decay each epoch from --decay-start) | plateau")
        ->capture_default_str()->check(CLI::IsMember({"cosine", "step", "plateau"}));
    app.add_option("--lr-decay", a.lr_decay, "step/plateau: factor")->capture_default_str();
    app.add_option("--decay-start", a.decay_start, "step: first epoch (0-based) with decay")->capture_default_str()
        ->check(apps::NonNegative);
    app.add_option("--plateau-patience", a.plateau_patience, "plateau: evaluations without improvement")
        ->capture_default_str();
    app.add_option("--weight-decay", a.weight_decay, "weight decay (AdamW: decoupled)")->capture_default_str()
        ->check(apps::NonNegative);
    app.add_option("--loss-scale", a.loss_scale,
                   "what the gradient is of: mean (the cross-entropy averaged over every scored token) | time-sum "
                   "(summed over each row's scored positions, averaged over the rows: Zaremba et al.'s and the "
                   "TensorFlow PTB tutorial's convention, for which their --lr 1 and --clip-grad 5 are set; the "
                   "gradient is --seq-len times the mean's under bptt). Reported losses and perplexities are the "
                   "mean either way")
        ->capture_default_str()->check(CLI::IsMember({"mean", "time-sum"}));
    apps::add_freeze_flags(app, a.freeze);
    apps::add_lr_scale_flag(app, a.lr_scale);
    app.add_option("--clip-grad", a.clip_grad, "global gradient-norm clip (0: off)")->capture_default_str()
        ->check(apps::NonNegative);
    apps::add_device_flags(app, a.device, &a.precision);
    app.add_option("--threads", a.threads, "CPU threads (0: all cores)")->capture_default_str()
        ->check(apps::NonNegative);
    apps::add_profile_flag(app, a.profile_steps);
    apps::add_cuda_graph_flag(app, a.cuda_graph);
    app.add_option("--seed", a.seed, "random seed")->capture_default_str();
    app.add_option("--out", a.out, "run directory: config.json, metrics.jsonl, vocab.txt, init.safetensors (the "
                                   "weights it starts from), checkpoints, result.json");
    app.add_flag("--resume", a.resume, "continue the run in --out from its last checkpoint");
    apps::add_overwrite_flag(app, a.overwrite);
    apps::add_auto_resume_flag(app, a.auto_resume);
    apps::add_dry_run_flag(app, a.dry_run);
    app.add_option("--log-every", a.log_every, "write a metrics line every N steps")->capture_default_str()
        ->check(apps::Positive);
    app.add_flag("!--no-nan-check", a.nan_check, "do not stop when the loss becomes NaN/inf");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    auto refuse = [](const std::string& msg) {
        std::fprintf(stderr, "train_lm: %s\n", msg.c_str());
        return 2;
    };
    try {
        init::validate(a.init);
    } catch (const Error& e) {
        return refuse(std::string("--init: ") + e.what());
    }
    if (std::string conflict = apps::out_dir_conflict(a.out, a.resume, a.overwrite, a.auto_resume); !conflict.empty())
        return refuse(conflict);
    if (a.protocol == "window" && a.scored > a.seq_len) return refuse("--scored must not exceed --seq-len");
    if (!a.preset.empty() && a.model != "lstm") return refuse("--preset applies to --model lstm only");
    // A flag given that the run would not use: refused where the run would be another than asked
    // for; a note where a flag of another model is given (one command for several models).
    const bool raw_wikitext = data::is_raw_wikitext(a.dataset);
    if (app.count("--level") && a.dataset != "text" && !raw_wikitext)
        return refuse("--level applies to --dataset text and wikitext*-raw (" + a.dataset + " has its own tokens)");
    if (raw_wikitext && !app.count("--level")) a.level = "char";
    if (raw_wikitext && a.level != "char" && a.level != "byte")
        return refuse("--level " + a.level + ": " + a.dataset + " is read at char or byte level (word level: --dataset " +
                      a.dataset.substr(0, a.dataset.size() - 4) + ", the tokenized text with <unk>)");
    if (!a.preset.empty())
        for (const char* flag : {"--dim", "--depth", "--dropout"})
            if (app.count(flag)) return refuse(std::string("--preset sets --dim, --depth and --dropout; ") + flag + " too");
    struct Unused { const char* flag; bool unused; std::string why; };
    const bool data_init = init::needs_data(a.init);
    for (const Unused& u : {Unused{"--heads", a.model != "transformer", "--model " + a.model},
                            Unused{"--pos", a.model != "transformer", "--model " + a.model},
                            Unused{"--post-norm", a.model != "transformer", "--model " + a.model},
                            Unused{"--act", a.model != "transformer", "--model " + a.model},
                            Unused{"--emb-dropout", a.model != "transformer", "--model " + a.model},
                            Unused{"--word-dropout", a.model != "transformer", "--model " + a.model},
                            Unused{"--s", a.model != "gau", "--model " + a.model},
                            Unused{"--gau-pre-norm", a.model != "gau", "--model " + a.model},
                            Unused{"--min-lr", a.schedule == "step", "--schedule " + a.schedule},
                            Unused{"--warmup-steps", a.schedule != "cosine", "--schedule " + a.schedule},
                            Unused{"--lr-decay", a.schedule == "cosine", "--schedule " + a.schedule},
                            Unused{"--decay-start", a.schedule != "step", "--schedule " + a.schedule},
                            Unused{"--plateau-patience", a.schedule != "plateau", "--schedule " + a.schedule},
                            Unused{"--eval-tokens", a.eval_every == 0, "no --eval-every"},
                            Unused{"--init-samples", !data_init, "--init " + a.init + " uses no data"}})
        if (u.unused) apps::note_unused_flag("train_lm", app, u.flag, u.why);
    if (a.head_bias && (a.model != "transformer" || !a.untied))
        return refuse("--head-bias applies to --model transformer with --untied");
    if ((a.pe_scale != 1.f || a.pe_every_block) && (a.model != "transformer" || a.pos == "rope" || a.pos == "none"))
        return refuse("--pe-scale and --pe-every-block apply to --model transformer with --pos sinusoidal or learned");
    if (a.emb_scale != 1.f && a.model != "transformer") return refuse("--emb-scale applies to --model transformer");
    apps::DeviceChoice dc = apps::resolve_device(a.device, a.precision);
    // A dry run checks the flags, not this machine: a device that is not here is only a note.
    if (!dc.error.empty() && !a.dry_run) return refuse(dc.error);
    if (!dc.error.empty()) std::printf("train_lm: --dry-run: %s (the run itself would stop here)\n", dc.error.c_str());
    if (!dc.note.empty()) std::printf("train_lm: %s\n", dc.note.c_str());
    apps::json config =
        apps::run_config(app, "train_lm", a.threads > 0 ? a.threads : omp_get_max_threads(), dc.description);
    config["--level"] = a.level;  // (raw WikiText's default is char, not the flag's)
    if (!a.preset.empty()) {  // the sizes the preset builds, not the flags' defaults it overrides
        nn::LSTMConfig p = preset_config(a.preset);
        config["--dim"] = std::to_string(p.hidden);
        config["--depth"] = std::to_string(p.layers);
        config["--dropout"] = fmt::format("{}", p.dropout);
    }
    if (int stop = apps::settle_run_start("train_lm", a.out, config, a.auto_resume, a.dry_run, a.resume, a.overwrite,
                                          [&] { return dry_run_model(a); });
        stop >= 0)
        return stop;
    try {
        apps::apply_precision(dc, a.precision);
        return run(a, config, dc.device);
    } catch (const Error& e) {
        std::fprintf(stderr, "train_lm: %s\n", e.what());
        return 1;
    }
}
