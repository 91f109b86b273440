// tests/cuda/test_cuda_cublas.cpp: engine::cuda::gemm / gemm_batched called directly: the
// row-major -> column-major mapping for every transpose pair, alpha/beta, shared operands in a
// batch, the TF32 math mode really switching, and the error paths (negative and too-large sizes).
#include <catch2/catch.hpp>

#include <array>
#include <climits>
#include <cmath>
#include "engine/cpu/matmul.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/runtime.h"
#include "engine/error.h"
#include "tests/cuda/parity.h"

using engine::Device;
using engine::Tensor;

namespace {

// Restores the TF32 flag when a test ends (or fails).
struct Tf32Guard {
    bool saved = engine::cuda::tf32();
    ~Tf32Guard() { engine::cuda::set_tf32(saved); }
};

Tensor stored(bool trans, int64_t rows, int64_t cols, uint64_t seed) {  // op(X) is [rows, cols]
    return test::randn(trans ? engine::Shape{cols, rows} : engine::Shape{rows, cols}, false, seed);
}

}  // namespace

// fp32 cuBLAS against OpenBLAS: the same products summed in another order; |C| ≲ 10 here, so the
// tolerance is atol 1e-4, rtol 1e-4.
TEST_CASE("cuda gemm: row-major layout for every transpose pair, alpha and beta", "[cuda]") {
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (auto [M, N, K] : {std::array<int64_t, 3>{1, 1, 1}, {7, 33, 5}, {33, 1, 7}, {1, 7, 33}, {5, 3, 1025}}) {
                INFO("ta " << ta << " tb " << tb << " M " << M << " N " << N << " K " << K);
                Tensor a = stored(ta, M, K, 1), b = stored(tb, K, N, 2), c = test::randn({M, N}, false, 3);
                Tensor want = c.clone();
                engine::cpu::gemm(ta, tb, M, N, K, 0.5f, a.data_f32(), b.data_f32(), -2.f, want.data_f32());
                Tensor da = a.to(Device::CUDA), db = b.to(Device::CUDA), got = c.to(Device::CUDA);
                engine::cuda::gemm(ta, tb, M, N, K, 0.5f, da.raw_f32(), db.raw_f32(), -2.f, got.raw_f32());
                test::require_close("gemm", want, got, {1e-4f, 1e-4f});
            }
}

TEST_CASE("cuda gemm: K = 0 gives beta * C, and empty outputs are a no-op", "[cuda]") {
    Tensor c = test::randn({3, 4}, false);
    Tensor got = c.to(Device::CUDA);
    Tensor a = Tensor::zeros({3, 0}, engine::DType::F32, Device::CUDA), b = Tensor::zeros({0, 4}, engine::DType::F32, Device::CUDA);
    engine::cuda::gemm(false, false, 3, 4, 0, 1.f, a.raw_f32(), b.raw_f32(), 2.f, got.raw_f32());
    Tensor want = c.clone();
    float* w = want.data_f32();
    for (int64_t i = 0; i < want.numel(); i++) w[i] *= 2.f;
    test::require_close("k=0", want, got, {0.f, 0.f});
    engine::cuda::gemm(false, false, 0, 4, 3, 1.f, nullptr, nullptr, 0.f, nullptr);  // M = 0: nothing to do
    engine::cuda::gemm_batched(false, false, 0, 3, 4, 5, nullptr, 0, nullptr, 0, nullptr, 0);
}

TEST_CASE("cuda gemm_batched: strided, and a shared operand (stride 0)", "[cuda]") {
    const int64_t batch = 3;
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (int shared : {0, 1, 2}) {  // 0: none, 1: A shared, 2: B shared
                INFO("ta " << ta << " tb " << tb << " shared " << shared);
                const int64_t M = 7, N = 5, K = 33;
                int64_t sa = shared == 1 ? 0 : M * K, sb = shared == 2 ? 0 : K * N;
                Tensor a = test::randn({shared == 1 ? 1 : batch, M * K}, false, 4);
                Tensor b = test::randn({shared == 2 ? 1 : batch, K * N}, false, 5);
                Tensor want = Tensor::empty({batch, M, N});
                engine::cpu::gemm_batched(ta, tb, batch, M, N, K, a.data_f32(), sa, b.data_f32(), sb, want.data_f32(), M * N);
                Tensor da = a.to(Device::CUDA), db = b.to(Device::CUDA);
                Tensor got = Tensor::empty({batch, M, N}, engine::DType::F32, Device::CUDA);
                engine::cuda::gemm_batched(ta, tb, batch, M, N, K, da.raw_f32(), sa, db.raw_f32(), sb, got.raw_f32(), M * N);
                test::require_close("gemm_batched", want, got, {1e-4f, 1e-4f});
            }
}

// TF32 keeps 10 mantissa bits of each input: 1 + 2^-12 becomes 1, so a row of 1 + 2^-12 times a
// column of 1s sums to 128·(1 + 2^-12) = 128.03125 (exact) in fp32 and to 128 in TF32. The GEMM is
// 128 cubed because cuBLAS is free to ignore the TF32 mode at tiny sizes: on an H200 a 1x1x1
// product came out in fp32. Random products stay within ~1e-2 relative of fp32.
TEST_CASE("cuda gemm: the TF32 math mode is applied and switched back", "[cuda]") {
    Tf32Guard guard;
    const int n = 128;
    const float v = 1.f + std::ldexp(1.f, -12);
    Tensor a = Tensor::full({n, n}, v, engine::DType::F32, Device::CUDA);
    Tensor b = Tensor::full({n, n}, 1.f, engine::DType::F32, Device::CUDA);
    Tensor c = Tensor::empty({n, n}, engine::DType::F32, Device::CUDA);
    const float fp32 = n * v, tf32 = (float)n;
    auto product = [&] {
        engine::cuda::gemm(false, false, n, n, n, 1.f, a.raw_f32(), b.raw_f32(), 0.f, c.raw_f32());
        return c.to_vector()[0];
    };
    engine::cuda::set_tf32(false);
    REQUIRE(product() == fp32);
    engine::cuda::set_tf32(true);
    REQUIRE(product() == tf32);
    engine::cuda::set_tf32(false);  // re-applied on the next call
    REQUIRE(product() == fp32);

    // Batched GEMMs follow the flag too.
    engine::cuda::set_tf32(true);
    engine::cuda::gemm_batched(false, false, 1, n, n, n, a.raw_f32(), 0, b.raw_f32(), 0, c.raw_f32(), n * n);
    REQUIRE(c.to_vector()[0] == tf32);

    // Random data: TF32 within 1e-2 relative of fp32 (|C| ~ 6: atol 2e-2), yet not identical.
    Tensor x = test::randn({n, 33}, false, 8), w = test::randn({33, n}, false, 9);
    Tensor want = Tensor::empty({n, n});
    engine::cpu::gemm(false, false, n, n, 33, 1.f, x.data_f32(), w.data_f32(), 0.f, want.data_f32());
    Tensor dx = x.to(Device::CUDA), dw = w.to(Device::CUDA), got = Tensor::empty({n, n}, engine::DType::F32, Device::CUDA);
    engine::cuda::gemm(false, false, n, n, 33, 1.f, dx.raw_f32(), dw.raw_f32(), 0.f, got.raw_f32());
    test::require_close("tf32 gemm", want, got, {2e-2f, 1e-2f});
    REQUIRE(want.to_vector() != got.to_vector());
}

TEST_CASE("cuda gemm: cuBLAS errors and sizes beyond int are refused naming gemm and the shapes", "[cuda]") {
    using Catch::Contains;
    Tensor buf = Tensor::zeros({16}, engine::DType::F32, Device::CUDA);
    float* p = buf.raw_f32();
    // A negative size reaches cuBLAS, which answers CUBLAS_STATUS_INVALID_VALUE.
    REQUIRE_THROWS_AS(engine::cuda::gemm(false, false, -1, 4, 4, 1.f, p, p, 0.f, p), engine::Error);
    REQUIRE_THROWS_WITH(engine::cuda::gemm(false, true, -1, 4, 4, 1.f, p, p, 0.f, p),
                        Contains("gemm") && Contains("cublasSgemm") && Contains("M=-1") && Contains("N=4") &&
                            Contains("trans_b=true") && Contains("CUBLAS_STATUS_INVALID_VALUE"));
    REQUIRE_THROWS_WITH(engine::cuda::gemm_batched(true, false, 2, 4, 4, -3, p, 0, p, 0, p, 0),
                        Contains("gemm_batched") && Contains("cublasSgemmStridedBatched") && Contains("K=-3") &&
                            Contains("batch=2") && Contains("trans_a=true") && Contains("CUBLAS_STATUS_INVALID_VALUE"));
    // Sizes that do not fit cuBLAS's int are refused before any call.
    const int64_t huge = (int64_t)INT_MAX + 1;
    REQUIRE_THROWS_WITH(engine::cuda::gemm(false, false, huge, 4, 4, 1.f, p, p, 0.f, p),
                        Contains("gemm") && Contains("M = 2147483648") && Contains("int limit"));
    REQUIRE_THROWS_WITH(engine::cuda::gemm_batched(false, false, huge, 1, 1, 1, p, 0, p, 0, p, 1),
                        Contains("gemm_batched") && Contains("batch = 2147483648"));
    // The handle still works after the errors.
    Tensor one = Tensor::full({1}, 2.f, engine::DType::F32, Device::CUDA), out = Tensor::empty({1}, engine::DType::F32, Device::CUDA);
    engine::cuda::gemm(false, false, 1, 1, 1, 1.f, one.raw_f32(), one.raw_f32(), 0.f, out.raw_f32());
    REQUIRE(out.item() == 4.f);
}
