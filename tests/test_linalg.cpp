// tests/test_linalg.cpp: SVD, QR, pseudo-inverse and least squares (engine/linalg.h), checked by
// their defining identities with plain double loops, and against a few hand-computed answers.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>
#include "engine/error.h"
#include "engine/linalg.h"
#include "engine/rng.h"
#include "tests/helpers.h"

using namespace engine;

namespace {

// A small dense double matrix, so the checks do not go through the code under test.
struct Mat {
    int64_t rows = 0, cols = 0;
    std::vector<double> v;
    Mat(int64_t r, int64_t c) : rows(r), cols(c), v(r * c, 0.0) {}
    explicit Mat(const Tensor& t) : rows(t.size(0)), cols(t.size(1)) {
        for (float x : t.to_vector()) v.push_back(x);
    }
    double& operator()(int64_t i, int64_t j) { return v[i * cols + j]; }
    double operator()(int64_t i, int64_t j) const { return v[i * cols + j]; }
};

Mat mul(const Mat& a, const Mat& b) {
    REQUIRE(a.cols == b.rows);
    Mat c(a.rows, b.cols);
    for (int64_t i = 0; i < a.rows; i++)
        for (int64_t l = 0; l < a.cols; l++)
            for (int64_t j = 0; j < b.cols; j++) c(i, j) += a(i, l) * b(l, j);
    return c;
}

Mat transpose(const Mat& a) {
    Mat t(a.cols, a.rows);
    for (int64_t i = 0; i < a.rows; i++)
        for (int64_t j = 0; j < a.cols; j++) t(j, i) = a(i, j);
    return t;
}

Mat identity(int64_t n) {
    Mat e(n, n);
    for (int64_t i = 0; i < n; i++) e(i, i) = 1;
    return e;
}

double max_abs_diff(const Mat& a, const Mat& b) {
    REQUIRE(a.rows == b.rows);
    REQUIRE(a.cols == b.cols);
    double m = 0;
    for (size_t i = 0; i < a.v.size(); i++) m = test::max_err(m, std::fabs(a.v[i] - b.v[i]));
    return m;
}

double max_abs(const Mat& a) {
    double m = 0;
    for (double x : a.v) m = test::max_err(m, std::fabs(x));
    return m;
}

Tensor gaussian(int64_t rows, int64_t cols, uint64_t seed) {
    Generator g(seed);
    Tensor t = Tensor::empty({rows, cols});
    g.normal(t.data_f32(), t.numel(), 0.f, 1.f);
    return t;
}

// A rows×cols matrix of rank `rank` (a product of two Gaussian factors).
Tensor low_rank(int64_t rows, int64_t cols, int64_t rank, uint64_t seed) {
    Mat p = mul(Mat(gaussian(rows, rank, seed)), Mat(gaussian(rank, cols, seed + 1)));
    std::vector<float> f(p.v.begin(), p.v.end());
    return Tensor::from_vector(f, {rows, cols});
}

Mat diag(const Tensor& s, int64_t rows, int64_t cols) {
    Mat d(rows, cols);
    for (int64_t i = 0; i < s.numel(); i++) d(i, i) = s.to_vector()[i];
    return d;
}

void check_svd(const Tensor& a, bool full) {
    int64_t m = a.size(0), n = a.size(1), k = std::min(m, n);
    SVD f = svd(a, full);
    int64_t uc = full ? m : k, vr = full ? n : k;
    REQUIRE(f.U.shape() == Shape({m, uc}));
    REQUIRE(f.S.shape() == Shape({k}));
    REQUIRE(f.Vt.shape() == Shape({vr, n}));
    CHECK(!f.U.requires_grad());
    CHECK(!f.S.requires_grad());

    Mat U(f.U), Vt(f.Vt), A(a);
    double scale = std::max(1.0, max_abs(A));
    CHECK(max_abs_diff(mul(mul(U, diag(f.S, uc, vr)), Vt), A) < 2e-5 * scale);
    CHECK(max_abs_diff(mul(transpose(U), U), identity(uc)) < 2e-6);
    CHECK(max_abs_diff(mul(Vt, transpose(Vt)), identity(vr)) < 2e-6);
    if (full) {  // square orthogonal factors: also U·Uᵀ = I and Vᵀ·V = I
        CHECK(max_abs_diff(mul(U, transpose(U)), identity(m)) < 2e-6);
        CHECK(max_abs_diff(mul(transpose(Vt), Vt), identity(n)) < 2e-6);
    }
    auto s = f.S.to_vector();
    for (int64_t i = 0; i < k; i++) {
        CHECK(s[i] >= 0.f);
        if (i > 0) CHECK(s[i] <= s[i - 1]);
    }
}

// The four Penrose conditions: A·X·A = A, X·A·X = X, (A·X)ᵀ = A·X, (X·A)ᵀ = X·A.
void check_penrose(const Tensor& a, const Tensor& x, double tol) {
    REQUIRE(x.shape() == Shape({a.size(1), a.size(0)}));
    Mat A(a), X(x);
    Mat ax = mul(A, X), xa = mul(X, A);
    CHECK(max_abs_diff(mul(ax, A), A) < tol * std::max(1.0, max_abs(A)));
    CHECK(max_abs_diff(mul(xa, X), X) < tol * std::max(1.0, max_abs(X)));
    CHECK(max_abs_diff(transpose(ax), ax) < tol);
    CHECK(max_abs_diff(transpose(xa), xa) < tol);
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("svd reconstructs tall, wide, square and rank-deficient matrices", "[linalg]") {
    for (bool full : {false, true}) {
        INFO("full_matrices = " << full);
        check_svd(gaussian(9, 4, 1), full);
        check_svd(gaussian(4, 9, 2), full);
        check_svd(gaussian(6, 6, 3), full);
        check_svd(gaussian(1, 5, 4), full);
        check_svd(gaussian(64, 48, 5), full);
        check_svd(low_rank(8, 6, 2, 6), full);
    }
}

TEST_CASE("svd: singular values of hand-computed matrices", "[linalg]") {
    // [[1,1],[0,1]]: singular values are the golden ratio φ and 1/φ.
    SVD f = svd(Tensor::from_vector(std::vector<float>{1, 1, 0, 1}, {2, 2}));
    double phi = (1 + std::sqrt(5.0)) / 2;
    CHECK(f.S.to_vector()[0] == Approx(phi).epsilon(1e-6));
    CHECK(f.S.to_vector()[1] == Approx(1 / phi).epsilon(1e-6));
    // A scaled permutation with a sign: singular values are the magnitudes, sorted.
    SVD g = svd(Tensor::from_vector(std::vector<float>{3, 0, 0, -4, 0, 0}, {3, 2}));
    CHECK(g.S.to_vector() == std::vector<float>{4, 3});
    // Rank 2: the third singular value vanishes (relative to the first).
    SVD h = svd(low_rank(8, 6, 2, 6));
    auto s = h.S.to_vector();
    CHECK(s[1] > 1e-2f * s[0]);
    CHECK(s[2] < 1e-5f * s[0]);
    // The zero matrix: all singular values are 0, U and Vt are still orthonormal.
    check_svd(Tensor::zeros({3, 2}), false);
    CHECK(svd(Tensor::zeros({3, 2})).S.to_vector() == std::vector<float>{0, 0});
}

TEST_CASE("svd: full_matrices shapes and empty inputs", "[linalg]") {
    Tensor a = gaussian(5, 3, 7);
    SVD thin = svd(a), full = svd(a, true);
    CHECK(thin.U.shape() == Shape({5, 3}));
    CHECK(thin.Vt.shape() == Shape({3, 3}));
    CHECK(full.U.shape() == Shape({5, 5}));
    CHECK(full.Vt.shape() == Shape({3, 3}));
    CHECK(full.S.shape() == Shape({3}));
    SVD e = svd(Tensor::zeros({0, 4}), true);
    CHECK(e.U.shape() == Shape({0, 0}));
    CHECK(e.S.shape() == Shape({0}));
    CHECK(e.Vt.shape() == Shape({4, 4}));
    CHECK(svd(Tensor::zeros({3, 0})).U.shape() == Shape({3, 0}));
}

TEST_CASE("svd: the input is left alone and may require grad", "[linalg]") {
    Tensor a = gaussian(4, 3, 8);
    auto before = a.to_vector();
    a.requires_grad_();
    SVD f = svd(a);
    CHECK(a.to_vector() == before);
    CHECK(!f.U.requires_grad());
    CHECK(!f.Vt.requires_grad());
}

TEST_CASE("qr: Q·R = A, orthonormal Q, upper-triangular R with a non-negative diagonal", "[linalg]") {
    std::vector<std::tuple<int64_t, int64_t, uint64_t>> cases{
        {7, 4, 11}, {4, 7, 12}, {5, 5, 13}, {40, 40, 14}, {6, 1, 15}};
    for (auto [m, n, seed] : cases) {
        INFO(m << "x" << n);
        Tensor a = gaussian(m, n, seed);
        int64_t k = std::min(m, n);
        QR f = qr(a);
        REQUIRE(f.Q.shape() == Shape({m, k}));
        REQUIRE(f.R.shape() == Shape({k, n}));
        Mat Q(f.Q), R(f.R), A(a);
        CHECK(max_abs_diff(mul(Q, R), A) < 2e-5 * std::max(1.0, max_abs(A)));
        CHECK(max_abs_diff(mul(transpose(Q), Q), identity(k)) < 2e-6);
        for (int64_t i = 0; i < k; i++) {
            CHECK(R(i, i) >= 0);
            for (int64_t j = 0; j < i; j++) CHECK(R(i, j) == 0);
        }
    }
}

TEST_CASE("qr: signs are fixed so the factorization is unique", "[linalg]") {
    // [-3,-4]ᵀ = Q·R with R = [5] >= 0 forces Q = [-0.6,-0.8]ᵀ.
    QR f = qr(Tensor::from_vector(std::vector<float>{-3, -4}, {2, 1}));
    CHECK(f.R.to_vector()[0] == Approx(5));
    CHECK(f.Q.to_vector()[0] == Approx(-0.6));
    CHECK(f.Q.to_vector()[1] == Approx(-0.8));
    // -A = (-Q)·R with the same R >= 0, so uniqueness means qr(-A) = (-Q, R).
    Tensor a = gaussian(5, 3, 16);
    Tensor neg_a = Tensor::from_vector([&] { auto v = a.to_vector(); for (float& x : v) x = -x; return v; }(),
                                       a.shape());
    QR p = qr(a), q = qr(neg_a);
    Mat Rp(p.R), Rq(q.R), Qp(p.Q), Qq(q.Q);
    CHECK(max_abs_diff(Rp, Rq) < 1e-5);
    for (size_t i = 0; i < Qp.v.size(); i++) CHECK(Qq.v[i] == Approx(-Qp.v[i]).margin(1e-6));
    // An upper-triangular matrix with a positive diagonal is its own R, with Q = I.
    QR t = qr(Tensor::from_vector(std::vector<float>{2, 1, 0, 3}, {2, 2}));
    CHECK(max_abs_diff(Mat(t.Q), identity(2)) < 1e-6);
    CHECK(t.R.to_vector() == std::vector<float>{2, 1, 0, 3});
}

TEST_CASE("pinv satisfies the Penrose conditions", "[linalg]") {
    check_penrose(gaussian(9, 4, 21), pinv(gaussian(9, 4, 21)), 1e-5);
    check_penrose(gaussian(3, 7, 22), pinv(gaussian(3, 7, 22)), 1e-5);
    Tensor r = low_rank(8, 6, 3, 23);
    check_penrose(r, pinv(r), 1e-4);
    // The zero matrix's pseudo-inverse is the zero matrix (transposed shape).
    Tensor z = pinv(Tensor::zeros({2, 3}));
    CHECK(z.shape() == Shape({3, 2}));
    CHECK(max_abs(Mat(z)) == 0);
}

TEST_CASE("pinv of an invertible matrix is its inverse", "[linalg]") {
    Tensor d = pinv(Tensor::from_vector(std::vector<float>{2, 0, 0, -4}, {2, 2}));
    CHECK(d.to_vector() == std::vector<float>{0.5f, 0, 0, -0.25f});
    // [[4,7],[2,6]]⁻¹ = [[0.6,-0.7],[-0.2,0.4]].
    auto inv = pinv(Tensor::from_vector(std::vector<float>{4, 7, 2, 6}, {2, 2})).to_vector();
    std::vector<double> want{0.6, -0.7, -0.2, 0.4};
    for (int i = 0; i < 4; i++) CHECK(inv[i] == Approx(want[i]).epsilon(1e-6));
    Tensor a = gaussian(12, 12, 24);
    Mat prod = mul(Mat(a), Mat(pinv(a)));
    CHECK(max_abs_diff(prod, identity(12)) < 1e-4);
}

TEST_CASE("pinv: rcond and max_rank truncate small singular values", "[linalg]") {
    // diag(10, 1e-3): with rcond 1e-3 (cutoff 0.01) the small value is dropped.
    Tensor a = Tensor::from_vector(std::vector<float>{10, 0, 0, 1e-3f}, {2, 2});
    CHECK(pinv(a, 1e-6).to_vector()[3] == Approx(1000).epsilon(1e-5));
    CHECK(pinv(a, 1e-3).to_vector() == std::vector<float>{0.1f, 0, 0, 0});
    CHECK(pinv(a, 1e-6, 1).to_vector() == std::vector<float>{0.1f, 0, 0, 0});
    CHECK(max_abs(Mat(pinv(a, 1e-6, 0))) == 0);
    // The rank-r truncated pseudo-inverse is the pseudo-inverse of the rank-r truncation.
    Tensor g = gaussian(7, 5, 25);
    SVD f = svd(g);
    Mat Ur(7, 2), Vr(2, 5);
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 2; j++) Ur(i, j) = f.U.at({i, j}) * f.S.at({j});
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 5; j++) Vr(i, j) = f.Vt.at({i, j});
    Mat trunc = mul(Ur, Vr);
    std::vector<float> tv(trunc.v.begin(), trunc.v.end());
    CHECK(max_abs_diff(Mat(pinv(g, 1e-6, 2)), Mat(pinv(Tensor::from_vector(tv, {7, 5})))) < 1e-4);
}

TEST_CASE("lstsq solves overdetermined and underdetermined systems", "[linalg]") {
    // Consistent overdetermined system: the known solution comes back.
    Tensor a = gaussian(30, 4, 31), x_true = gaussian(4, 2, 32);
    Mat B = mul(Mat(a), Mat(x_true));
    Tensor b = Tensor::from_vector(std::vector<float>(B.v.begin(), B.v.end()), {30, 2});
    Tensor x = lstsq(a, b);
    REQUIRE(x.shape() == Shape({4, 2}));
    CHECK(max_abs_diff(Mat(x), Mat(x_true)) < 1e-5);

    // Inconsistent system: the residual is orthogonal to the columns of a (normal equations),
    // and x agrees with pinv(a)·b.
    Tensor noisy = gaussian(30, 2, 33);
    Tensor xn = lstsq(a, noisy);
    Mat resid = mul(Mat(a), Mat(xn));
    Mat Bn(noisy);
    for (size_t i = 0; i < resid.v.size(); i++) resid.v[i] -= Bn.v[i];
    CHECK(max_abs(mul(transpose(Mat(a)), resid)) < 1e-4);
    CHECK(max_abs_diff(Mat(xn), mul(Mat(pinv(a)), Bn)) < 1e-5);

    // b as a vector gives x as a vector.
    Tensor bv = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
    Tensor av = Tensor::from_vector(std::vector<float>{1, 0, 0, 1, 1, 1}, {3, 2});  // fit x0, x1, x0+x1
    Tensor xv = lstsq(av, bv);
    REQUIRE(xv.shape() == Shape({2}));
    CHECK(xv.to_vector()[0] == Approx(1).epsilon(1e-6));  // (1,2) fits all three exactly
    CHECK(xv.to_vector()[1] == Approx(2).epsilon(1e-6));

    // Underdetermined: the minimum-norm solution, x = pinv(a)·b.
    Tensor w = gaussian(3, 6, 34), bw = gaussian(3, 1, 35);
    Tensor xw = lstsq(w, bw);
    REQUIRE(xw.shape() == Shape({6, 1}));
    CHECK(max_abs_diff(Mat(xw), mul(Mat(pinv(w)), Mat(bw))) < 1e-5);
    CHECK(max_abs_diff(mul(Mat(w), Mat(xw)), Mat(bw)) < 1e-5);
}

TEST_CASE("linalg: bad inputs are errors naming the function and the shape", "[linalg]") {
    Tensor t3 = Tensor::zeros({2, 3, 4});
    CHECK_THAT(error_of([&] { svd(t3); }), Catch::Contains("svd") && Catch::Contains("[2,3,4]"));
    CHECK_THAT(error_of([&] { qr(t3); }), Catch::Contains("qr") && Catch::Contains("2-d"));
    CHECK_THAT(error_of([&] { pinv(Tensor::zeros({5})); }), Catch::Contains("pinv") && Catch::Contains("[5]"));
    Tensor i32 = Tensor::zeros({3, 3}, DType::I32);
    CHECK_THAT(error_of([&] { svd(i32); }), Catch::Contains("svd") && Catch::Contains("float32"));
    CHECK_THAT(error_of([&] { lstsq(gaussian(3, 2, 1), i32); }), Catch::Contains("lstsq: b [3,3] must be float32"));

    Tensor nan = gaussian(4, 3, 41);
    nan.set({2, 1}, std::numeric_limits<float>::quiet_NaN());
    CHECK_THAT(error_of([&] { svd(nan); }), Catch::Contains("svd") && Catch::Contains("[4,3]") &&
                                                Catch::Contains("NaN"));
    CHECK_THAT(error_of([&] { qr(nan); }), Catch::Contains("qr") && Catch::Contains("NaN"));
    CHECK_THAT(error_of([&] { pinv(nan); }), Catch::Contains("pinv") && Catch::Contains("NaN"));
    Tensor inf = gaussian(4, 3, 42);
    inf.set({0, 0}, std::numeric_limits<float>::infinity());
    CHECK_THAT(error_of([&] { lstsq(inf, gaussian(4, 1, 43)); }), Catch::Contains("lstsq") && Catch::Contains("Inf"));
    CHECK_THAT(error_of([&] { lstsq(gaussian(4, 3, 44), gaussian(5, 1, 45)); }),
               Catch::Contains("lstsq") && Catch::Contains("rows differ"));
    CHECK_THAT(error_of([&] { svd(Tensor()); }), Catch::Contains("svd"));
}
