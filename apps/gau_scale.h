// apps/gau_scale.h: estimates of a freshly initialized Gated Attention Unit's output scale
// rms(GAU(x))/rms(x): Su's s·ν⁶/n (seed 001, notes §3.3) and the refined estimate derived here.
// Used by apps/gau_scale and tests/test_init_misc.cpp. Header-only (plain math, no engine).
//
// Setting (Su's): x ~ N(0, 1) [n, d]; W_u, W_v, W_z ~ N(0, λ²/d), W_o ~ N(0, λ²/e) (LeCun × λ),
// no biases, Q = K = Z, no RoPE; A = relu²(QKᵀ)/(n·s); O = (U ⊙ A·V)·W_o.
//
// ---------------------------------------------------------------------------------------------
// Derivation. Each pre-activation h = x·w is ≈ N(0, λ²r²) with r² = ‖x‖²/d. For φ = silu and
// ε ~ N(0, 1), write the Gaussian moments at pre-activation std σ:
//     μ(σ) = E φ(σε),  ν²(σ) = E φ(σε)²,  κ(σ) = E φ(σε)⁴,  c(σ) = E[ε·φ(σε)]
// (σ = 1: μ = 0.2066, ν² = 0.3557, c = 1/2). Plain μ, ν², c below are at σ = λ (the average key).
//
// Row i of the output is O_i = (U_i ⊙ Σ_j A_ij V_j)·W_o, A_ij = relu(g_ij)²/(n·s), g_ij = ⟨Z_i, Z_j⟩.
//
// Su's estimate: g_ii ≈ sν², so A ≈ (sν⁴/n)·I; E[(U⊙V)²] = ν⁴ and W_o keeps the second moment:
//     rms(O) ≈ s·ν⁶/n, and every weight × λ gives ≈ λ⁷ times that.
// It drops the off-diagonal entries: each is only ≈ sμ⁴/n (69 times smaller than the diagonal),
// but there are n − 1 of them per row, and they multiply V_j, whose entries have mean μ > 0
// (silu is not centred), so they add up coherently.
//
// Refined: (A·V)_ie = A_ii·V_ie + M_i with M_i = Σ_{j≠i} A_ij V_je ≈ μ·Σ_{j≠i} A_ij (its
// fluctuation around that is √n times smaller). Condition on row i — its norm r and its
// S₁ = Σ_t Z_it set all of its g_ij at once:
//   - r² ≈ 1 + N(0, 2/d): row i's U, V and Z have moments at σ = λr (written μ_r, ν_r², κ_r, c_r);
//   - diagonal: g_ii = Σ_t Z_it² ~ N(sν_r², s(κ_r − ν_r⁴)), so E[A_ii] = E[g_ii²]/(ns) and
//     E[A_ii²] = E[g_ii⁴]/(ns)² (Gaussian moments of g);
//   - off the diagonal: S₁ ~ N(sμ_r, s(ν_r² − μ_r²)); over the keys j, g_ij has mean μ·S₁ and
//     variance sν_r²(ν² − μ²) + s²c_r²c²/d. The last term is the rows' input correlation
//     ρ = x_i·x_j/d ~ N(0, 1/d): E[φ(h)φ(h')] = μ² + c²ρ + O(ρ²) for pre-activations of correlation ρ
//     (Hermite expansion), summed coherently over the s columns;
//   - for g ~ N(m, v): E relu(g)² = (m² + v)·Φ(m/√v) + m√v·φ(m/√v), so A_ij averages
//     ā_i = E relu(g_ij)²/(ns), and M_i = K_i·ā_i·μ with K_i = n − 1 keys (causal: K_i = i);
//   - U_i is independent of A's row given r, and W_o ~ N(0, λ²/e):
//       E[O²] = λ²·E_{r,S₁}[ ν_r²·(E[A_ii²]·ν_r² + 2·E[A_ii]·μ_r·M_i + M_i²) ],  ratio ≈ √E[O²],
//     the expectations over r and S₁ by quadrature. Setting M_i = 0, r = 1, g_ii = sν² gives Su's.
// Left out: ρ² terms, the correlation of A_ii with M_i within a row, and the spread of U_i beyond
// its norm. Against measurement (non-causal, s = 128, n = 512): within ~10% for d ≥ 256, and
// ~20% low at d = 64 where those terms grow. The λ dependence it predicts (≈ λ⁹ at λ = ½, since
// the dominant M_i ∝ μ³ and μ(σ) ≈ σ/2 + σ²/4·… shrinks fastest) matches the measured factor.
#pragma once
#include <cmath>

namespace gau_theory {

struct SiluMoments {
    double mu, nu2, kappa, c;
};

// Moments of silu(σε), ε ~ N(0, 1), by Simpson's rule on [−12, 12].
inline SiluMoments silu_moments(double sigma) {
    const int steps = 2400;  // even
    const double lo = -12, hi = 12, h = (hi - lo) / steps;
    SiluMoments m{0, 0, 0, 0};
    for (int i = 0; i <= steps; i++) {
        double e = lo + i * h, w = (i == 0 || i == steps) ? 1 : (i % 2 ? 4 : 2);
        double k = w * h / 3 * std::exp(-0.5 * e * e) / std::sqrt(2 * M_PI);
        double x = sigma * e, f = x / (1 + std::exp(-x));
        m.mu += k * f;
        m.nu2 += k * f * f;
        m.kappa += k * f * f * f * f;
        m.c += k * e * f;
    }
    return m;
}

inline double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }
inline double normal_pdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI); }

// E[relu(g)²] for g ~ N(m, v).
inline double relu2_mean(double m, double v) {
    if (v <= 0) return m > 0 ? m * m : 0;
    double sd = std::sqrt(v);
    return (m * m + v) * normal_cdf(m / sd) + m * sd * normal_pdf(m / sd);
}

// E f(z), z ~ N(0, 1), by Simpson's rule on [−6, 6].
template <typename F>
double expect_normal(F f, int steps = 48) {
    const double lo = -6, hi = 6, h = (hi - lo) / steps;
    double s = 0;
    for (int i = 0; i <= steps; i++) {
        double z = lo + i * h, w = (i == 0 || i == steps) ? 1 : (i % 2 ? 4 : 2);
        s += w * h / 3 * normal_pdf(z) * f(z);
    }
    return s;
}

struct Estimates {
    double su;           // s·ν⁶/n·λ⁷
    double refined;      // the estimate derived above
    double diag_a;       // E[A_ii] for an average row (r = 1)
    double offdiag_a;    // ā for an average row (r = 1, S₁ = sμ)
    double offdiag_sum;  // the mean over rows of M_i
};

// What one row contributes, given its input norm r² = 1 + zr·√(2/d).
struct RowTerms {
    double e_o2 = 0;        // ν_r²·(E[A_ii²]ν_r² + 2E[A_ii]μ_r·E[M_i] + E[M_i²]), before λ²
    double m = 0;           // E[M_i] over S₁
    double a1 = 0, a_avg = 0;
};

inline RowTerms row_terms(double zr, double d, double s, double n, double lambda, bool causal) {
    RowTerms t;
    double r2 = 1 + zr * std::sqrt(2 / d);
    if (r2 <= 0) return t;
    const SiluMoments key = silu_moments(lambda), q = silu_moments(lambda * std::sqrt(r2));
    const double ns = n * s;
    // Keys per row K, and the mean over rows of K and K².
    const double k1 = causal ? (n - 1) / 2 : n - 1, k2 = causal ? (n - 1) * (2 * n - 1) / 6 : (n - 1) * (n - 1);
    double gm = s * q.nu2, gv = s * (q.kappa - q.nu2 * q.nu2);  // g_ii
    double a1 = (gm * gm + gv) / ns, a2 = (gm * gm * gm * gm + 6 * gm * gm * gv + 3 * gv * gv) / (ns * ns);
    double v = s * q.nu2 * (key.nu2 - key.mu * key.mu) + s * s * q.c * q.c * key.c * key.c / d;  // g_ij | row
    double s1_sd = std::sqrt(std::max(0.0, s * (q.nu2 - q.mu * q.mu)));
    auto a_mu = [&](double z) { return relu2_mean(key.mu * (s * q.mu + z * s1_sd), v) / ns * key.mu; };  // ā_i·μ
    double am = expect_normal(a_mu), am2 = expect_normal([&](double z) { return a_mu(z) * a_mu(z); });
    t.m = k1 * am;
    t.e_o2 = q.nu2 * (a2 * q.nu2 + 2 * a1 * q.mu * k1 * am + k2 * am2);
    t.a1 = a1;
    t.a_avg = a_mu(0) / key.mu;
    return t;
}

inline Estimates estimate(double d, double s, double n, double lambda, bool causal) {
    const SiluMoments one = silu_moments(1.0);
    Estimates est{};
    est.su = s * std::pow(one.nu2, 3) / n * std::pow(lambda, 7);
    auto row = [&](double zr) { return row_terms(zr, d, s, n, lambda, causal); };
    est.refined = lambda * std::sqrt(expect_normal([&](double zr) { return row(zr).e_o2; }, 24));
    est.offdiag_sum = expect_normal([&](double zr) { return row(zr).m; }, 24);
    RowTerms mid = row(0);
    est.diag_a = mid.a1;
    est.offdiag_a = mid.a_avg;
    return est;
}

}  // namespace gau_theory
