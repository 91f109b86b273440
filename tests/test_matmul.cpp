// tests/test_matmul.cpp: matmul (all transpose and batch forms) and linear.
#include <catch2/catch.hpp>

#include "engine/error.h"
#include "engine/ops.h"
#include "tests/helpers.h"

using namespace engine;
using test::gradcheck;
using test::param;

// C[i,j] = Σ_k A[i,k] B[k,j] by direct loops, A [M,K], B [K,N].
static std::vector<float> naive(const Tensor& a, const Tensor& b, int64_t M, int64_t K, int64_t N) {
    std::vector<float> c(M * N, 0.f);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            for (int64_t k = 0; k < K; k++) c[i * N + j] += a.data_f32()[i * K + k] * b.data_f32()[k * N + j];
    return c;
}

TEST_CASE("matmul matches a direct triple loop", "[matmul]") {
    Tensor a = param({5, 7}, 1), b = param({7, 3}, 2);
    Tensor c = matmul(a, b);
    auto want = naive(a, b, 5, 7, 3);
    for (int i = 0; i < 15; i++) CHECK(c.data_f32()[i] == Approx(want[i]).margin(1e-5));
    // Transposed storage gives the same product.
    Tensor ct = matmul(transpose(a, 0, 1), transpose(b, 0, 1), true, true);
    CHECK(test::max_abs_diff(c, ct) < 1e-5f);
    // Batched: each batch entry separately.
    Tensor A = param({2, 3, 5, 7}, 3), B = param({2, 3, 7, 4}, 4);
    Tensor C = matmul(A, B);
    CHECK(C.shape() == Shape({2, 3, 5, 4}));
    Tensor A1 = A.reshape({6, 5, 7}).narrow(0, 4, 1).reshape({5, 7}), B1 = B.reshape({6, 7, 4}).narrow(0, 4, 1).reshape({7, 4});
    auto w = naive(A1, B1, 5, 7, 4);
    for (int i = 0; i < 20; i++) CHECK(C.reshape({6, 20}).at({4, i}) == Approx(w[i]).margin(1e-5));
    // Products above gemm_batched's across-the-batch size (M·N·K > 2^21) take its one-by-one path.
    Tensor Ab = param({2, 130, 160}, 6), Bb = param({2, 160, 110}, 7);
    Tensor Cb = matmul(Ab, Bb);
    auto wb = naive(Ab.narrow(0, 1, 1).reshape({130, 160}).clone(), Bb.narrow(0, 1, 1).reshape({160, 110}).clone(),
                    130, 160, 110);
    for (int i = 0; i < 130 * 110; i += 97) CHECK(Cb.reshape({2, 130 * 110}).at({1, i}) == Approx(wb[i]).margin(1e-4));
    // A batch against one shared matrix.
    Tensor S = matmul(A, b.reshape({7, 3}));
    CHECK(S.shape() == Shape({2, 3, 5, 3}));
    CHECK_THROWS_WITH(matmul(param({32, 64}, 1), param({32, 64}, 2)),
                      Catch::Contains("matmul: [32,64] x [32,64]: inner dims differ"));
    CHECK_THROWS_WITH(matmul(A, param({3, 2, 7, 4}, 5)), Catch::Contains("batch dims differ"));
}

TEST_CASE("matmul", "[gradcheck]") {
    GENERATE_COPY(0);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            Tensor a = param(ta ? Shape{4, 3} : Shape{3, 4}, 1), b = param(tb ? Shape{2, 4} : Shape{4, 2}, 2);
            gradcheck("matmul_" + std::to_string(ta) + std::to_string(tb),
                      [ta, tb](auto& in) { return matmul(in[0], in[1], ta, tb); }, {a, b});
            Tensor A = param(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, 3), B = param(tb ? Shape{2, 2, 4} : Shape{2, 4, 2}, 4);
            gradcheck("bmm_" + std::to_string(ta) + std::to_string(tb),
                      [ta, tb](auto& in) { return matmul(in[0], in[1], ta, tb); }, {A, B});
            gradcheck("bmm_shared_b_" + std::to_string(ta) + std::to_string(tb),
                      [ta, tb](auto& in) { return matmul(in[0], in[1], ta, tb); }, {A, b});
            gradcheck("bmm_shared_a_" + std::to_string(ta) + std::to_string(tb),
                      [ta, tb](auto& in) { return matmul(in[0], in[1], ta, tb); }, {a, B});
        }
}

TEST_CASE("linear", "[gradcheck]") {
    Tensor x = param({2, 3, 4}, 1), w = param({5, 4}, 2), b = param({5}, 3);
    Tensor y = linear(x, w, b);
    CHECK(y.shape() == Shape({2, 3, 5}));
    Tensor ref = add(matmul(x, w, false, true), b);
    CHECK(test::max_abs_diff(y, ref) < 1e-5f);
    gradcheck("linear", [](auto& in) { return linear(in[0], in[1], in[2]); }, {x, w, b});
    gradcheck("linear_nobias", [](auto& in) { return linear(in[0], in[1]); }, {x, w});
    CHECK_THROWS_WITH(linear(x, param({5, 3}, 4)), Catch::Contains("in_features=3"));
}
