// tests/cuda/test_cuda_matmul.cpp: matmul and linear on the device against the CPU (check_parity),
// forward and backward, every layout the op supports; TF32 mode; mixed devices refused.
//
// Tolerances: fp32 GEMMs on both sides summing the same products in a different order. Inputs are
// N(0,1), so with K <= 33 outputs are ~|6| and agree to ~1e-6: atol 1e-4, rtol 1e-4. With K = 1025
// (|C| ~ 32, and a GPU's blocked sums differ more) atol 1e-3, rtol 1e-4.
#include <catch2/catch.hpp>

#include "engine/cpu/matmul.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/runtime.h"
#include "tests/cuda/parity.h"

using engine::Device;
using engine::Shape;
using engine::Tensor;
using test::check_parity;
using test::randn;

namespace {

const test::Tol kTol{1e-4f, 1e-4f};
const test::Tol kTolLongK{1e-3f, 1e-4f};

// op(X) of [rows, cols] with `lead` leading dims: stored [lead..., cols, rows] when transposed.
Shape operand(std::vector<int64_t> lead, bool trans, int64_t rows, int64_t cols) {
    lead.push_back(trans ? cols : rows);
    lead.push_back(trans ? rows : cols);
    return Shape(lead);
}

void check_matmul(const std::string& what, std::vector<int64_t> lead_a, std::vector<int64_t> lead_b, int64_t M,
                  int64_t N, int64_t K, test::Tol tol = kTol) {
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            INFO(what << " ta " << ta << " tb " << tb);
            Tensor a = randn(operand(lead_a, ta, M, K), true, 1), b = randn(operand(lead_b, tb, K, N), true, 2);
            check_parity(what, [ta, tb](auto& in) { return engine::matmul(in[0], in[1], ta, tb); }, {a, b}, tol, tol);
        }
}

struct Tf32Guard {
    bool saved = engine::cuda::tf32();
    ~Tf32Guard() { engine::cuda::set_tf32(saved); }
};

}  // namespace

TEST_CASE("cuda matmul: plain, trans_a, trans_b, both", "[cuda]") {
    check_matmul("matmul 7x33 . 33x5", {}, {}, 7, 5, 33);
    check_matmul("matmul 1x1 . 1x1", {}, {}, 1, 1, 1);
    check_matmul("matmul 1x7 . 7x1", {}, {}, 1, 1, 7);
    check_matmul("matmul 33x1 . 1x7", {}, {}, 33, 7, 1);
}

TEST_CASE("cuda matmul: a dim of 1025", "[cuda]") {
    check_matmul("matmul M=1025", {}, {}, 1025, 2, 3);
    check_matmul("matmul N=1025", {}, {}, 2, 1025, 3);
    check_matmul("matmul K=1025", {}, {}, 3, 2, 1025, kTolLongK);
}

TEST_CASE("cuda matmul: leading dims of A with a shared B (flattened rows, or batched when A is transposed)", "[cuda]") {
    check_matmul("matmul [2,3,7,5] . [5,4]", {2, 3}, {}, 7, 4, 5);
    check_matmul("matmul [1,7,33] . [33,1]", {1}, {}, 7, 1, 33);
}

TEST_CASE("cuda matmul: shared A with a batched B", "[cuda]") {
    check_matmul("matmul [7,5] . [3,5,4]", {}, {3}, 7, 4, 5);
}

TEST_CASE("cuda matmul: batched with equal batch dims", "[cuda]") {
    check_matmul("matmul [2,3,7,5] . [2,3,5,4]", {2, 3}, {2, 3}, 7, 4, 5);
    check_matmul("matmul [1,1,33] . [1,33,7]", {1}, {1}, 1, 7, 33);
}

// Widths of 5, 1025 (the bias rows' per-element kernel) and 12 (its float4 kernel); the bias by
// the bias rows and a GEMM with beta = 1, and by cuBLASLt's bias epilogue.
TEST_CASE("cuda linear: with and without bias", "[cuda]") {
    const bool lt = GENERATE(false, true);
    test::LtBiasScope lt_scope(lt);
    INFO("cuBLASLt bias epilogue " << lt);
    const uint64_t lt_before = engine::cuda::lt_bias_calls();
    for (auto [lead, in, out] : std::vector<std::tuple<std::vector<int64_t>, int64_t, int64_t>>{
             {{2, 7}, 33, 5}, {{1}, 1, 1}, {{1025}, 3, 2}, {{3}, 7, 1025}, {{5, 3}, 9, 12}}) {
        std::vector<int64_t> xs = lead;
        xs.push_back(in);
        Tensor x = randn(Shape(xs), true, 3), w = randn({out, in}, true, 4), b = randn({out}, true, 5);
        INFO("in " << in << " out " << out);
        check_parity("linear + bias", [](auto& t) { return engine::linear(t[0], t[1], t[2]); }, {x, w, b}, kTol, kTol);
        Tensor x2 = randn(Shape(xs), true, 6), w2 = randn({out, in}, true, 7);
        check_parity("linear", [](auto& t) { return engine::linear(t[0], t[1]); }, {x2, w2}, kTol, kTol);
    }
    // Only some inputs need gradients.
    Tensor x = randn({7, 33}, false, 8), w = randn({5, 33}, true, 9), b = randn({5}, false, 10);
    check_parity("linear, grad of w only", [](auto& t) { return engine::linear(t[0], t[1], t[2]); }, {x, w, b}, kTol, kTol);
    CHECK((engine::cuda::lt_bias_calls() > lt_before) == lt);
}

// linear with a residual (a Pre-LN block's add inside proj's and fc2's GEMMs): the rows of bias +
// residual, float4 (12 columns) or not (5; 3 with a 3-d input), then the GEMM adding into them; or,
// where on, cuBLASLt's bias epilogue with the residual as its C (without a bias: the rows).
TEST_CASE("cuda linear: a residual added by the GEMM, with and without bias", "[cuda]") {
    const bool lt = GENERATE(false, true);
    test::LtBiasScope lt_scope(lt);
    INFO("cuBLASLt bias epilogue " << lt);
    const uint64_t lt_before = engine::cuda::lt_bias_calls();
    for (auto [lead, in, out] : std::vector<std::tuple<std::vector<int64_t>, int64_t, int64_t>>{
             {{2, 7}, 33, 12}, {{9}, 8, 5}, {{3, 4}, 16, 3}, {{1}, 1, 1}}) {
        INFO("in " << in << " out " << out);
        std::vector<int64_t> xs = lead, rs = lead;
        xs.push_back(in);
        rs.push_back(out);
        Tensor x = randn(Shape(xs), true, 31), w = randn({out, in}, true, 32), b = randn({out}, true, 33),
               r = randn(Shape(rs), true, 34);
        check_parity("linear + bias + residual", [](auto& t) { return engine::linear(t[0], t[1], t[2], t[3]); },
                     {x, w, b, r}, kTol, kTol);
        check_parity("linear + residual", [](auto& t) { return engine::linear(t[0], t[1], Tensor(), t[2]); },
                     {x, w, r}, kTol, kTol);
    }
    CHECK((engine::cuda::lt_bias_calls() > lt_before) == lt);
    Tensor x = randn({4, 8}, true, 35).to(Device::CUDA), w = randn({4, 8}, true, 36).to(Device::CUDA);
    CHECK_THROWS_WITH(engine::linear(x, w, Tensor(), randn({4, 4}, false, 37)),
                      Catch::Contains("linear: [4,8] is on cuda but [4,4] is on cpu"));  // the residual
}

namespace {

// The four GEMM modes (fp32; tf32; bf16 rounded into scratch, mode 2; bf16 that cuBLAS rounds
// itself, mode 3) and the four transposes, each set for the call to body(mode, ta, tb); the
// settings are restored after. vs_cpu(mode): the tolerance against fp32 on the CPU: fp32's kTol (the
// summation order only); TF32 and bf16 round each input, by up to 2^-11 and 2^-8 relative (|C| ~ 6
// at K = 37).
void for_each_mode_and_transpose(const std::function<void(int, bool, bool)>& body) {
    using engine::cuda::GemmPrecision;
    test::PrecisionScope precision;
    test::Bf16FastGemmScope fast_scope;
    test::LtBiasScope lt_scope;
    for (int mode = 0; mode < 4; mode++)
        for (bool ta : {false, true})
            for (bool tb : {false, true}) {
                const GemmPrecision p = mode == 0   ? GemmPrecision::fp32
                                        : mode == 1 ? GemmPrecision::tf32
                                                    : GemmPrecision::bf16;
                INFO("precision " << engine::cuda::gemm_precision_name(p) << " fast " << (mode == 3) << " ta " << ta
                                  << " tb " << tb);
                engine::cuda::set_gemm_precision(p);
                engine::cuda::set_bf16_fast_gemm(mode == 3);
                body(mode, ta, tb);
            }
}
test::Tol vs_cpu(int mode) {
    if (mode == 0) return kTol;
    return mode >= 2 ? test::Tol{5e-2f, 2e-2f} : test::Tol{2e-2f, 1e-2f};
}

}  // namespace

// gemm_bias in each precision and transpose, with and without a residual, against the bias (+
// residual) rows plus a GEMM with beta = 1 (the fallback, and the CPU's way), and against the CPU;
// the epilogue's calls counted.
TEST_CASE("cuda gemm_bias: cuBLASLt's bias epilogue against the bias rows and a GEMM", "[cuda]") {
    const int64_t M = 9, N = 12, K = 37;
    for_each_mode_and_transpose([&](int mode, bool ta, bool tb) {
        for (bool with_residual : {false, true}) {
            INFO("residual " << with_residual);
            Tensor a = randn(ta ? Shape{K, M} : Shape{M, K}, false, 11),
                   b = randn(tb ? Shape{N, K} : Shape{K, N}, false, 12);
            Tensor bias = randn({N}, false, 13), residual = randn({M, N}, false, 14);
            Tensor da = a.to(Device::CUDA), db = b.to(Device::CUDA), dbias = bias.to(Device::CUDA),
                   dresidual = residual.to(Device::CUDA);
            const float* r = with_residual ? dresidual.raw_f32() : nullptr;
            auto run = [&](bool lt) {
                engine::cuda::set_lt_bias(lt);
                Tensor c = Tensor::empty({M, N}, engine::DType::F32, Device::CUDA);
                const uint64_t before = engine::cuda::lt_bias_calls();
                engine::cuda::gemm_bias(ta, tb, M, N, K, da.raw_f32(), db.raw_f32(), dbias.raw_f32(), c.raw_f32(),
                                        r);
                CHECK(engine::cuda::lt_bias_calls() - before == (lt ? 1u : 0u));
                return c.to(Device::CPU);
            };
            Tensor fused = run(true), plain = run(false), want = Tensor::empty({M, N});
            engine::cpu::gemm_bias(ta, tb, M, N, K, a.data_f32(), b.data_f32(), bias.data_f32(), want.data_f32(),
                                   with_residual ? residual.data_f32() : nullptr);
            test::require_close("epilogue vs bias rows + GEMM", plain, fused, kTol);
            test::require_close("vs the CPU", want, fused, vs_cpu(mode));
        }
    });
}

// gemm_dbias (linear's dW = gᵀ·x with db = Σ_rows g) in each precision, transpose and beta, with
// cuBLASLt's bias-gradient epilogue (BGRADB) and without (gemm, then the column sums), against
// each other and against the CPU. The epilogue is taken where A is read as fp32: not for bf16's
// rounded copies (mode 2).
TEST_CASE("cuda gemm_dbias: cuBLASLt's bias-gradient epilogue against a GEMM and the sums", "[cuda]") {
    const int64_t M = 12, N = 9, K = 37;
    for_each_mode_and_transpose([&](int mode, bool ta, bool tb) {
        for (float beta : {0.f, 1.f}) {
            INFO("beta " << beta);
            Tensor a = randn(ta ? Shape{K, M} : Shape{M, K}, false, 15),
                   b = randn(tb ? Shape{N, K} : Shape{K, N}, false, 16), c0 = randn({M, N}, false, 17);
            Tensor da = a.to(Device::CUDA), db = b.to(Device::CUDA);
            auto run = [&](bool lt, Tensor& sums) {
                engine::cuda::set_lt_bias(lt);
                Tensor c = c0.to(Device::CUDA), s = Tensor::empty({M}, engine::DType::F32, Device::CUDA);
                const uint64_t before = engine::cuda::lt_bias_calls();
                engine::cuda::gemm_dbias(ta, tb, M, N, K, da.raw_f32(), db.raw_f32(), beta, c.raw_f32(),
                                         s.raw_f32());
                CHECK(engine::cuda::lt_bias_calls() - before == (lt && mode != 2 ? 1u : 0u));
                sums = s.to(Device::CPU);
                return c.to(Device::CPU);
            };
            Tensor lt_sums, plain_sums, want_sums = Tensor::empty({M}), want = c0.clone();
            Tensor fused = run(true, lt_sums), plain = run(false, plain_sums);
            engine::cpu::gemm_dbias(ta, tb, M, N, K, a.data_f32(), b.data_f32(), beta, want.data_f32(),
                                    want_sums.data_f32());
            test::require_close("epilogue vs GEMM + sums", plain, fused, kTol);
            test::require_close("sums: epilogue vs sum_dim", plain_sums, lt_sums, kTol);
            test::require_close("sums vs the CPU", want_sums, lt_sums, kTol);
            test::require_close("vs the CPU", want, fused, vs_cpu(mode));
        }
    });
}

// cuBLASLt assumes 256-byte aligned operands unless the preference says less (the emulator's
// stand-in refuses an operand less aligned than its algorithm was chosen for): operands at 4-,
// 8- and 16-byte offsets, as views into bigger tensors are, in fp32 and bf16.
TEST_CASE("cuda gemm_bias: cuBLASLt's epilogue on operands less aligned than 256 bytes", "[cuda]") {
    using engine::cuda::GemmPrecision;
    test::PrecisionScope precision;
    test::LtBiasScope lt_scope(true);
    const int64_t M = 5, N = 8, K = 7;
    for (GemmPrecision p : {GemmPrecision::fp32, GemmPrecision::bf16})
        for (int64_t offset : {1, 2, 4}) {  // floats
            INFO("precision " << engine::cuda::gemm_precision_name(p) << " offset " << offset);
            engine::cuda::set_gemm_precision(p);
            Tensor a = randn({M * K + offset}, false, 21).to(Device::CUDA);
            Tensor b = randn({K * N + offset}, false, 22).to(Device::CUDA);
            Tensor bias = randn({N + offset}, false, 23).to(Device::CUDA);
            Tensor c = Tensor::empty({M * N + offset}, engine::DType::F32, Device::CUDA);
            const uint64_t before = engine::cuda::lt_bias_calls();
            engine::cuda::gemm_bias(false, false, M, N, K, a.raw_f32() + offset, b.raw_f32() + offset,
                                    bias.raw_f32() + offset, c.raw_f32() + offset);
            CHECK(engine::cuda::lt_bias_calls() - before == 1u);
            Tensor want = Tensor::empty({M, N}, engine::DType::F32, Device::CUDA);
            engine::cuda::set_lt_bias(false);
            engine::cuda::gemm_bias(false, false, M, N, K, a.raw_f32() + offset, b.raw_f32() + offset,
                                    bias.raw_f32() + offset, want.raw_f32());
            engine::cuda::set_lt_bias(true);
            std::vector<float> got = c.to_vector();
            got.erase(got.begin(), got.begin() + offset);
            test::require_close("epilogue at an offset", want.to(Device::CPU), Tensor::from_vector(got, {M, N}), kTol);
        }
}

// Autotuned GEMMs (engine/cuda/matmul.h's gemm_autotune_enabled): cuBLASLt's candidates (several in
// the emulator's stand-in, the same product each) timed once per shape. Each precision, both
// transposes, alpha and beta (C read: the timing runs must not leave their sums in it), an operand
// at an offset (another alignment: tuned again); inside a graph capture nothing is timed and the
// replay gives the product. Against gemm with autotuning off. Shapes are new to the process.
TEST_CASE("cuda gemm autotune: tuned once per shape, the same product as cuBLAS, none timed in a capture", "[cuda]") {
    using engine::cuda::GemmPrecision;
    test::PrecisionScope precision;
    test::Bf16FastGemmScope fast_scope;
    test::GemmAutotuneScope tune_scope(true);
    static int64_t fresh = 100;  // a new M each time (the tuned shapes live as long as the process)
    const int64_t N = 12, K = 37;
    for (int mode = 0; mode < 4; mode++)  // fp32, tf32, bf16 packed, bf16 fast
        for (bool ta : {false, true})
            for (bool tb : {false, true})
                for (float beta : {0.f, 0.5f}) {
                    const GemmPrecision p = mode == 0   ? GemmPrecision::fp32
                                            : mode == 1 ? GemmPrecision::tf32
                                                        : GemmPrecision::bf16;
                    const int64_t M = fresh++;
                    INFO("precision " << engine::cuda::gemm_precision_name(p) << " fast " << (mode == 3) << " ta "
                                      << ta << " tb " << tb << " beta " << beta << " M " << M);
                    engine::cuda::set_gemm_precision(p);
                    engine::cuda::set_bf16_fast_gemm(mode == 3);
                    const int64_t offset = ta ? 1 : 0;  // A at 4 bytes past an allocation's start
                    Tensor a = randn({M * K + offset}, false, 31).to(Device::CUDA);
                    Tensor b = randn({K * N}, false, 32).to(Device::CUDA);
                    Tensor c0 = randn({M, N}, false, 33);
                    auto product = [&](bool tuned) {
                        engine::cuda::set_gemm_autotune(tuned);
                        Tensor c = c0.to(Device::CUDA);
                        engine::cuda::gemm(ta, tb, M, N, K, 1.5f, a.raw_f32() + offset, b.raw_f32(), beta, c.raw_f32());
                        return c.to(Device::CPU);
                    };
                    const engine::cuda::GemmAutotuneStats before = engine::cuda::gemm_autotune_stats();
                    Tensor first = product(true), again = product(true);
                    const engine::cuda::GemmAutotuneStats after = engine::cuda::gemm_autotune_stats();
                    CHECK(after.tunings - before.tunings == 1u);
                    CHECK(after.tuned_calls - before.tuned_calls == 2u);
                    Tensor plain = product(false);
                    test::require_close("tuned against cuBLAS", plain, first, kTol);
                    CHECK(first.to_vector() == again.to_vector());  // the kept algorithm each time
                }
    // One shape at two alignments: an algorithm chosen for a 256-byte aligned A must not serve an
    // A 4 bytes off (the emulator refuses it), so the second is tuned of its own.
    engine::cuda::set_gemm_autotune(true);
    {
        const int64_t M = fresh++;
        Tensor a = randn({M * K + 1}, false, 36).to(Device::CUDA), b = randn({K * N}, false, 37).to(Device::CUDA);
        Tensor c = Tensor::empty({M, N}, engine::DType::F32, Device::CUDA);
        const engine::cuda::GemmAutotuneStats before = engine::cuda::gemm_autotune_stats();
        engine::cuda::gemm(false, false, M, N, K, 1.f, a.raw_f32(), b.raw_f32(), 0.f, c.raw_f32());
        engine::cuda::gemm(false, false, M, N, K, 1.f, a.raw_f32() + 1, b.raw_f32(), 0.f, c.raw_f32());
        CHECK(engine::cuda::gemm_autotune_stats().tunings == before.tunings + 2);
    }
    // In a capture: the heuristic's first candidate, nothing timed or kept; the replay computes.
    engine::cuda::set_gemm_precision(GemmPrecision::tf32);
    const int64_t M = fresh++;
    Tensor a = randn({M, K}, false, 34).to(Device::CUDA), b = randn({K, N}, false, 35).to(Device::CUDA);
    Tensor c = Tensor::zeros({M, N}).to(Device::CUDA);
    const engine::cuda::GemmAutotuneStats before = engine::cuda::gemm_autotune_stats();
    engine::cuda::CudaGraph graph = engine::cuda::capture(
        [&] { engine::cuda::gemm(false, false, M, N, K, 1.f, a.raw_f32(), b.raw_f32(), 0.f, c.raw_f32()); });
    CHECK(engine::cuda::gemm_autotune_stats().tunings == before.tunings);
    CHECK(engine::cuda::gemm_autotune_stats().tuned_calls == before.tuned_calls + 1);
    graph.launch();
    Tensor want = Tensor::empty({M, N});
    engine::cpu::gemm(false, false, M, N, K, 1.f, a.to(Device::CPU).data_f32(), b.to(Device::CPU).data_f32(), 0.f,
                      want.data_f32());
    test::require_close("replayed", want, c.to(Device::CPU), test::Tol{2e-2f, 1e-2f});
    engine::cuda::gemm(false, false, M, N, K, 1.f, a.raw_f32(), b.raw_f32(), 0.f, c.raw_f32());  // eager: tuned now
    CHECK(engine::cuda::gemm_autotune_stats().tunings == before.tunings + 1);
}

// Autotuned strided batches: gemm_batched_layout as attention calls it (heads grouped in a
// [B, T, 3·H·D] projection, a call per head; C with padded rows and beta = 1; a shared operand),
// in fp32, TF32 and bf16, against the same with autotuning off.
TEST_CASE("cuda gemm autotune: strided batches, as attention's per-head calls", "[cuda]") {
    using engine::cuda::GemmPrecision;
    test::PrecisionScope precision;
    test::GemmAutotuneScope tune_scope;
    static int64_t fresh = 300;  // a new T each time
    const int64_t B = 2, H = 2, D = 8;
    for (GemmPrecision p : {GemmPrecision::fp32, GemmPrecision::tf32, GemmPrecision::bf16})
        for (bool shared : {false, true}) {
            const int64_t T = fresh++, row = 3 * H * D, ldp = T + 3;
            INFO("precision " << engine::cuda::gemm_precision_name(p) << " T " << T << " shared k " << shared);
            engine::cuda::set_gemm_precision(p);
            Tensor qkv = randn({B * T * row}, false, 41).to(Device::CUDA);
            Tensor c0 = randn({B * H * T * ldp}, false, 42);
            const engine::cuda::BatchLayout q_at{row, D, H, T * row}, p_at{ldp, T * ldp};
            const engine::cuda::BatchLayout k_at = shared ? engine::cuda::BatchLayout{row, 0} : q_at;
            auto scores = [&](bool tuned) {
                engine::cuda::set_gemm_autotune(tuned);
                Tensor c = c0.to(Device::CUDA);
                engine::cuda::gemm_batched_layout(false, true, B * H, T, T, D, qkv.raw_f32(), q_at,
                                                  qkv.raw_f32() + H * D, k_at, c.raw_f32(), p_at, 1.f);
                return c.to(Device::CPU);
            };
            const uint64_t before = engine::cuda::gemm_autotune_stats().tunings;
            Tensor tuned = scores(true);
            CHECK(engine::cuda::gemm_autotune_stats().tunings > before);
            test::require_close("tuned against cuBLAS", scores(false), tuned, kTol);
        }
}

// TF32: inputs rounded to 10 mantissa bits, so results are within ~1e-2 relative of fp32
// (N(0,1) inputs, K = 33: |C| ~ 6, atol 5e-2, rtol 1e-2), and not equal to them.
TEST_CASE("cuda matmul: TF32 mode", "[cuda]") {
    Tf32Guard guard;
    engine::cuda::set_tf32(true);
    const test::Tol tol{5e-2f, 1e-2f};
    Tensor a = randn({7, 33}, true, 11), b = randn({33, 5}, true, 12);
    check_parity("matmul tf32", [](auto& in) { return engine::matmul(in[0], in[1]); }, {a, b}, tol, tol);
    Tensor x = randn({2, 7, 33}, true, 13), w = randn({5, 33}, true, 14), bias = randn({5}, true, 15);
    check_parity("linear tf32", [](auto& t) { return engine::linear(t[0], t[1], t[2]); }, {x, w, bias}, tol, tol);

    Tensor a2 = randn({7, 33}, false, 11), b2 = randn({33, 5}, false, 12);
    Tensor fp32 = engine::matmul(a2, b2), tf32 = engine::matmul(a2.to(Device::CUDA), b2.to(Device::CUDA));
    REQUIRE(fp32.to_vector() != tf32.to_vector());  // the mode really changed the arithmetic
    engine::cuda::set_tf32(false);
    test::require_close("matmul after tf32 off", fp32, engine::matmul(a2.to(Device::CUDA), b2.to(Device::CUDA)), kTol);
}

TEST_CASE("cuda matmul: operands on different devices are refused", "[cuda]") {
    using Catch::Contains;
    Tensor a = randn({3, 4}, false), b = randn({4, 2}, false);
    REQUIRE_THROWS_WITH(engine::matmul(a, b.to(Device::CUDA)), Contains("matmul") && Contains("cpu") && Contains("cuda"));
    Tensor w = randn({2, 4}, false), bias = randn({2}, false);
    REQUIRE_THROWS_WITH(engine::linear(a.to(Device::CUDA), w), Contains("linear") && Contains("cuda"));
    REQUIRE_THROWS_WITH(engine::linear(a.to(Device::CUDA), w.to(Device::CUDA), bias),
                        Contains("linear") && Contains("cpu") && Contains("cuda"));
}
