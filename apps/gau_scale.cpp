// apps/gau_scale.cpp: how small a freshly initialized Gated Attention Unit's output is, measured,
// next to Su's estimate s·ν⁶/n (seed 001, notes §3.3) and a refined estimate (apps/gau_scale.h); and
// how the output shrinks when every weight is scaled by λ, next to Su's λ⁷.
//
//   ./apps/gau_scale --d 768 --s 128 --n 512 --lambda 0.5 --lambda 0.25
//
// Setting (Su's): x ~ N(0, 1) [n, d]; W_u, W_v, W_z ~ N(0, 1/d) (the GAU's `hidden` layer),
// W_o ~ N(0, 1/e), no biases, Q = K = Z (γ = 1, β = 0), no RoPE, every query sees all n keys
// (--causal and --rope switch those on). ratio = rms(GAU(x)) / rms(x).
//
// The refined estimate and its derivation: apps/gau_scale.h.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>
#include <fmt/format.h>
#include "apps/gau_scale.h"
#include "apps/common/run.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "engine/rng.h"
#include "nn/gau.h"

using namespace engine;

static double rms(const Tensor& t) {
    const float* p = t.data_f32();
    double s = 0;
    for (int64_t i = 0; i < t.numel(); i++) s += (double)p[i] * p[i];
    return std::sqrt(s / t.numel());
}

// rms(GAU(x))/rms(x) for a fresh LeCun-normal GAU with every weight × λ, averaged over `trials`
// draws of weights and input.
static double measure(int64_t d, int64_t e, int64_t s, int64_t n, double lambda, bool causal, bool rope,
                      int trials, uint64_t seed) {
    NoGrad ng;
    double sum = 0;
    for (int t = 0; t < trials; t++) {
        manual_seed(seed + t);
        nn::GAU gau(d, e, s, causal, rope, false);
        Tensor wh = Tensor::normal(gau.hidden->weight.shape(), 0.f, (float)(lambda / std::sqrt((double)d)));
        Tensor wo = Tensor::normal(gau.out->weight.shape(), 0.f, (float)(lambda / std::sqrt((double)e)));
        std::copy(wh.data_f32(), wh.data_f32() + wh.numel(), gau.hidden->weight.data_f32());
        std::copy(wo.data_f32(), wo.data_f32() + wo.numel(), gau.out->weight.data_f32());
        Tensor x = Tensor::normal({1, n, d});
        sum += rms(gau.forward(x)) / rms(x);
    }
    return sum / trials;
}

int main(int argc, char** argv) {
    CLI::App app{"Measure a fresh GAU's output scale against Su's s·ν⁶/n and λ⁷, and a refined estimate that "
                 "keeps A's off-diagonal mean (see the header comment of apps/gau_scale.cpp)."};
    int64_t d = 768, s = 128, n = 512, e = 0;
    std::vector<double> lambdas;
    bool causal = false, rope = false;
    int trials = 3;
    uint64_t seed = 0;
    app.add_option("--d", d, "model width d")->capture_default_str()->check(apps::Positive);
    app.add_option("--s", s, "shared Q/K width s")->capture_default_str()->check(apps::Positive);
    app.add_option("--n", n, "sequence length n")->capture_default_str()->check(CLI::Range((int64_t)2, (int64_t)8192));
    app.add_option("--e", e, "U/V width e (0: 2d)")->capture_default_str()->check(apps::NonNegative);
    app.add_option("--lambda", lambdas,
                   "weight scale(s) λ to compare with λ⁷: a comma list or the flag repeated (default: 0.5)")
        ->delimiter(',')->check(CLI::Range(1e-3, 10.0));
    app.add_flag("--causal", causal, "causal mask (default off: Su's analysis lets every query see all n keys)");
    app.add_flag("--rope", rope, "rotary embeddings on Q and K (default off, as in the analysis)");
    app.add_option("--trials", trials, "independent draws of weights and input averaged per figure")
        ->capture_default_str()->check(CLI::Range(1, 1000));
    app.add_option("--seed", seed, "random seed")->capture_default_str();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& err) {
        return app.exit(err) == 0 ? 0 : 2;
    }
    if (e == 0) e = 2 * d;
    if (lambdas.empty()) lambdas = {0.5};
    if (rope && s % 2) {
        std::fprintf(stderr, "gau_scale: --rope needs an even --s, got %lld\n", (long long)s);
        return 2;
    }
    try {
        gau_theory::SiluMoments m = gau_theory::silu_moments(1.0);
        std::printf("GAU d=%lld e=%lld s=%lld n=%lld, %s, %s, LeCun-normal weights, no biases, x ~ N(0,1), %d trial%s\n",
                    (long long)d, (long long)e, (long long)s, (long long)n, causal ? "causal" : "non-causal",
                    rope ? "RoPE" : "no RoPE", trials, trials == 1 ? "" : "s");
        std::printf("silu moments: mu = %.4f, nu^2 = %.4f, E[eps*silu] = %.4f\n", m.mu, m.nu2, m.c);
        gau_theory::Estimates base = gau_theory::estimate(d, s, n, 1.0, causal);
        double measured = measure(d, e, s, n, 1.0, causal, rope, trials, seed);
        std::printf("A: diagonal %.4g (Su s*nu^4/n = %.4g), off-diagonal %.4g (Su s*mu^4/n = %.4g), "
                    "off-diagonal sum x mean(V) %.4g\n",
                    base.diag_a, s * m.nu2 * m.nu2 / n, base.offdiag_a, s * std::pow(m.mu, 4) / n, base.offdiag_sum);
        std::printf("\nrms(GAU(x))/rms(x): measured %.4f | Su s*nu^6/n %.4f (measured/Su %.2fx) | refined %.4f "
                    "(measured/refined %.2fx)\n",
                    measured, base.su, measured / base.su, base.refined, measured / base.refined);
        if (rope)
            std::printf("note: both estimates assume no RoPE; RoPE rotates Z's positive mean away, so the "
                        "off-diagonal sum they count mostly cancels\n");
        std::printf("\n%8s %12s %12s %10s %12s %14s\n", "lambda", "measured", "factor", "lambda^7", "refined",
                    "refined factor");
        for (double lambda : lambdas) {
            gau_theory::Estimates est = gau_theory::estimate(d, s, n, lambda, causal);
            double r = measure(d, e, s, n, lambda, causal, rope, trials, seed);
            // At λ = 1 the factor is 1 whatever the power: there is no exponent to read off.
            std::string power = lambda == 1.0 ? std::string("(λ = 1: the reference)")
                                              : fmt::format("(factor = lambda^{:.2f})", std::log(r / measured) / std::log(lambda));
            std::printf("%8.3g %12.4g %12.4g %10.4g %12.4g %14.4g   %s\n", lambda, r, r / measured, std::pow(lambda, 7),
                        est.refined, est.refined / base.refined, power.c_str());
        }
    } catch (const Error& err) {
        std::fprintf(stderr, "gau_scale: %s\n", err.what());
        return 1;
    }
    return 0;
}
