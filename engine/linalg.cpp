// engine/linalg.cpp: SVD, QR, pseudo-inverse and least squares through LAPACKE, in double.
//
// Every routine copies its float32 input into a row-major double buffer (checking it on the
// way), calls LAPACKE with LAPACK_ROW_MAJOR, and rounds the factors back to float32 once.
#include "engine/linalg.h"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>
#include "engine/ops/common.h"

namespace engine {

// ---------------------------------------------------------------------------------------------
// Reading inputs and writing results.

// The checks every input gets, then its values as doubles. NaN/Inf is refused up front: LAPACK
// may loop forever or return garbage on it.
static std::vector<double> read_values(const char* op, const Tensor& t, const char* what) {
    expect_f32(op, t, what);
    check(t.device() == Device::CPU, "{}: {} {} is on {}; linalg runs on the CPU (move it with .to(Device::CPU))", op,
          what, t.shape().str(), device_name(t.device()));
    // LAPACK indexes with 32-bit ints (and multiplies them): stay well inside that range.
    check(t.numel() <= INT_MAX, "{}: {} {} has {} elements, more than LAPACK's 32-bit indexing allows", op, what,
          t.shape().str(), t.numel());
    const float* p = t.data_f32();
    std::vector<double> v(t.numel());
    for (int64_t i = 0; i < t.numel(); i++) {
        check(std::isfinite(p[i]), "{}: {} {} contains NaN or Inf (element {} is {})", op, what, t.shape().str(), i,
              p[i]);
        v[i] = p[i];
    }
    return v;
}

static std::vector<double> read_matrix(const char* op, const Tensor& a, const char* what = "input") {
    expect_defined(op, a, what);
    check(a.ndim() == 2, "{}: {} must be a 2-d matrix, got {}", op, what, a.shape().str());
    return read_values(op, a, what);
}

// rows×cols float tensor from the row-major double block p with leading dimension ld.
static Tensor to_float(const double* p, int64_t rows, int64_t cols, int64_t ld) {
    Tensor t = Tensor::empty({rows, cols});
    float* q = t.data_f32();
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) q[i * cols + j] = (float)p[i * ld + j];
    return t;
}

static Tensor eye(int64_t n) {
    Tensor t = Tensor::zeros({n, n});
    for (int64_t i = 0; i < n; i++) t.data_f32()[i * n + i] = 1.f;
    return t;
}

// ---------------------------------------------------------------------------------------------
// SVD in double, shared by svd() and pinv().

struct SvdDouble {
    int64_t m = 0, n = 0, k = 0;
    int64_t u_cols = 0, vt_rows = 0;  // k (thin) or m and n (full)
    std::vector<double> u, s, vt;      // row-major [m, u_cols], [k], [vt_rows, n]
};

// a is the row-major [m,n] matrix (destroyed). m, n >= 1.
static SvdDouble svd_double(std::vector<double> a, int64_t m, int64_t n, bool full, const char* op) {
    SvdDouble r;
    r.m = m, r.n = n, r.k = std::min(m, n);
    r.u_cols = full ? m : r.k;
    r.vt_rows = full ? n : r.k;
    r.u.resize(m * r.u_cols);
    r.s.resize(r.k);
    r.vt.resize(r.vt_rows * n);
    std::vector<double> a_copy = a;  // dgesdd overwrites a; keep it for the fallback

    char job = full ? 'A' : 'S';
    lapack_int info = LAPACKE_dgesdd(LAPACK_ROW_MAJOR, job, (lapack_int)m, (lapack_int)n, a.data(), (lapack_int)n,
                                     r.s.data(), r.u.data(), (lapack_int)r.u_cols, r.vt.data(), (lapack_int)n);
    if (info > 0) {  // divide and conquer did not converge: QR iteration is slower but sturdier
        std::vector<double> superb(std::max<int64_t>(r.k - 1, 1));
        info = LAPACKE_dgesvd(LAPACK_ROW_MAJOR, job, job, (lapack_int)m, (lapack_int)n, a_copy.data(), (lapack_int)n,
                              r.s.data(), r.u.data(), (lapack_int)r.u_cols, r.vt.data(), (lapack_int)n, superb.data());
    }
    check(info == 0, "{}: [{},{}]: LAPACK SVD failed (info {}){}", op, m, n, (int)info,
          info > 0 ? ": did not converge" : ": bad argument");
    return r;
}

SVD svd(const Tensor& a, bool full_matrices) {
    std::vector<double> v = read_matrix("svd", a);
    int64_t m = a.size(0), n = a.size(1), k = std::min(m, n);
    if (k == 0)  // nothing to factor: the singular vectors are any orthonormal bases
        return {full_matrices ? eye(m) : Tensor::zeros({m, 0}), Tensor::zeros({0}),
                full_matrices ? eye(n) : Tensor::zeros({0, n})};
    SvdDouble d = svd_double(std::move(v), m, n, full_matrices, "svd");
    return {to_float(d.u.data(), m, d.u_cols, d.u_cols), to_float(d.s.data(), 1, k, k).reshape({k}),
            to_float(d.vt.data(), d.vt_rows, n, n)};
}

// ---------------------------------------------------------------------------------------------

QR qr(const Tensor& a) {
    std::vector<double> v = read_matrix("qr", a);
    int64_t m = a.size(0), n = a.size(1), k = std::min(m, n);
    if (k == 0) return {Tensor::zeros({m, 0}), Tensor::zeros({0, n})};

    std::vector<double> tau(k);
    lapack_int info = LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, (lapack_int)m, (lapack_int)n, v.data(), (lapack_int)n,
                                     tau.data());
    check(info == 0, "qr: [{},{}]: LAPACK dgeqrf failed (info {})", m, n, (int)info);
    // R is the upper triangle of the first k rows; dorgqr then overwrites the Householder
    // vectors below it with Q, in the first k columns.
    std::vector<double> r(k * n, 0.0);
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = i; j < n; j++) r[i * n + j] = v[i * n + j];
    info = LAPACKE_dorgqr(LAPACK_ROW_MAJOR, (lapack_int)m, (lapack_int)k, (lapack_int)k, v.data(), (lapack_int)n,
                          tau.data());
    check(info == 0, "qr: [{},{}]: LAPACK dorgqr failed (info {})", m, n, (int)info);

    // Householder QR leaves the sign of each R_ii arbitrary; flipping row i of R together with
    // column i of Q keeps Q·R and makes the factors unique.
    for (int64_t i = 0; i < k; i++) {
        if (r[i * n + i] >= 0) continue;
        for (int64_t j = i; j < n; j++) r[i * n + j] = -r[i * n + j];
        for (int64_t row = 0; row < m; row++) v[row * n + i] = -v[row * n + i];
    }
    return {to_float(v.data(), m, k, n), to_float(r.data(), k, n, n)};
}

// ---------------------------------------------------------------------------------------------

Tensor pinv(const Tensor& a, double rcond, int64_t max_rank) {
    std::vector<double> v = read_matrix("pinv", a);
    check(rcond >= 0 && std::isfinite(rcond), "pinv: {}: rcond must be finite and >= 0, got {}", a.shape().str(),
          rcond);
    int64_t m = a.size(0), n = a.size(1);
    if (std::min(m, n) == 0) return Tensor::zeros({n, m});
    SvdDouble d = svd_double(std::move(v), m, n, false, "pinv");

    // S is descending, so the kept singular values are a prefix of length `rank`.
    double cutoff = rcond * d.s[0];
    int64_t rank = 0;
    while (rank < d.k && d.s[rank] > cutoff) rank++;
    if (max_rank >= 0) rank = std::min(rank, max_rank);
    if (rank == 0) return Tensor::zeros({n, m});

    // a⁺ = V_r·diag(1/s_r)·U_rᵀ: scale U's first `rank` columns, then one GEMM
    // [n,m] = (Vt[:rank, :])ᵀ · (U[:, :rank]·diag(1/s))ᵀ.
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < rank; j++) d.u[i * d.k + j] /= d.s[j];
    std::vector<double> x(n * m);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasTrans, (int)n, (int)m, (int)rank, 1.0, d.vt.data(), (int)n,
                d.u.data(), (int)d.k, 0.0, x.data(), (int)m);
    return to_float(x.data(), n, m, m);
}

// ---------------------------------------------------------------------------------------------

Tensor lstsq(const Tensor& a, const Tensor& b, double rcond) {
    std::vector<double> av = read_matrix("lstsq", a, "a");
    expect_defined("lstsq", b, "b");
    check(b.ndim() == 1 || b.ndim() == 2, "lstsq: a {}: b must be [m] or [m,r], got {}", a.shape().str(),
          b.shape().str());
    std::vector<double> bv = read_values("lstsq", b, "b");
    check(rcond >= 0 && std::isfinite(rcond), "lstsq: rcond must be finite and >= 0, got {}", rcond);
    int64_t m = a.size(0), n = a.size(1), r = b.ndim() == 2 ? b.size(1) : 1;
    check(b.size(0) == m, "lstsq: a {} and b {}: rows differ ({} vs {})", a.shape().str(), b.shape().str(), m,
          b.size(0));
    Shape out_shape = b.ndim() == 2 ? Shape{n, r} : Shape{n};
    if (std::min(m, n) == 0 || r == 0) return Tensor::zeros(out_shape);

    // dgelsd reads b from, and writes x into, one [max(m,n), r] array.
    int64_t rows = std::max(m, n);
    std::vector<double> bx(rows * r, 0.0);
    std::copy(bv.begin(), bv.end(), bx.begin());
    std::vector<double> s(std::min(m, n));
    lapack_int rank = 0;
    std::vector<double> a_copy = av;  // dgelsd overwrites a; keep it for the fallback
    lapack_int info = LAPACKE_dgelsd(LAPACK_ROW_MAJOR, (lapack_int)m, (lapack_int)n, (lapack_int)r, av.data(),
                                     (lapack_int)n, bx.data(), (lapack_int)r, s.data(), rcond, &rank);
    check(info >= 0, "lstsq: a {}, b {}: LAPACK dgelsd got a bad argument (info {})", a.shape().str(),
          b.shape().str(), (int)info);
    if (info > 0) {  // its SVD did not converge: x = a⁺·b through the SVD with a dgesvd fallback
        SvdDouble d = svd_double(std::move(a_copy), m, n, false, "lstsq");
        double cutoff = rcond * d.s[0];
        std::fill(bx.begin(), bx.end(), 0.0);
        // x = Σ_l v_l (u_lᵀ b) / s_l over the kept singular values.
        for (int64_t l = 0; l < d.k && d.s[l] > cutoff; l++)
            for (int64_t c = 0; c < r; c++) {
                double ub = 0;
                for (int64_t i = 0; i < m; i++) ub += d.u[i * d.k + l] * bv[i * r + c];
                for (int64_t j = 0; j < n; j++) bx[j * r + c] += d.vt[l * n + j] * ub / d.s[l];
            }
    }
    return to_float(bx.data(), n, r, r).reshape(out_shape);
}

}  // namespace engine
