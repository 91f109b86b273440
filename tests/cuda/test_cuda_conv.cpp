// tests/cuda/test_cuda_conv.cpp: conv2d, depthwise_conv2d and batch_norm on the device against the
// CPU (check_parity), forward and backward: strides, padding, bias or none, ViT patch embedding
// (kernel = stride = patch), 1x1 (the pointwise shortcut) and 1x1 strided, non-square kernels,
// channel counts 1, 3, 7, a 33x33 image, the chunked im2col path; depthwise k 1, 3, 5, 9; batch norm
// in training (with and without running statistics, which must move as on the CPU) and eval, on
// [N, C, H, W], [N, C] and [N, C, L]; bitwise repeatability; mixed devices refused.
//
// Every parity check runs twice: with the own kernels (cuDNN switched off) and with cuDNN when the
// build has it (engine/cuda/cudnn.h; tests/cuda/test_cuda_cudnn.cpp compares the two directly).
//
// Tolerances (inputs N(0,1)):
//   conv2d: fp32 sums of at most Cin·kh·kw = 75 products (forward, dx) and N·OH·OW products (dW,
//     db) in a different order (cuBLAS vs OpenBLAS): atol 1e-4, rtol 1e-4; on the 33x33 image
//     (dW sums 1089 products, |dW| ~ 30) atol 1e-3, rtol 1e-4.
//   depthwise: the same taps in the same order (forward, dx: atol 1e-5, rtol 1e-5); dw, db sum
//     N·H·W products in double in another order: atol 1e-4, rtol 1e-4.
//   batch_norm: statistics summed in double on both sides: atol 1e-5, rtol 1e-4 forward and for
//     the running statistics; backward (two more reductions) atol 1e-4, rtol 1e-4.
#include <catch2/catch.hpp>

#include "engine/cuda/conv.h"
#include "tests/cuda/parity.h"

using engine::Device;
using engine::Tensor;
using test::check_parity;
using test::randn;

namespace {

const test::Tol kConvTol{1e-4f, 1e-4f};
const test::Tol kConvTolBig{1e-3f, 1e-4f};
const test::Tol kDwFwdTol{1e-5f, 1e-5f};
const test::Tol kDwBwdTol{1e-4f, 1e-4f};
const test::Tol kBnFwdTol{1e-5f, 1e-4f};
const test::Tol kBnBwdTol{1e-4f, 1e-4f};

// Runs `check` with the own kernels, then with cuDNN if the build has it.
template <typename F>
void on_both_paths(F check) {
    for (bool cudnn : {false, true}) {
        if (cudnn && !engine::cuda::cudnn_built()) continue;
        INFO((cudnn ? "cuDNN" : "own kernels"));
        const bool saved = engine::cuda::set_cudnn(cudnn);
        try {
            check();
        } catch (...) {
            engine::cuda::set_cudnn(saved);
            throw;
        }
        engine::cuda::set_cudnn(saved);
    }
}

struct ConvCase {
    const char* name;
    int64_t N, Cin, H, W, Cout, kh, kw;
    int stride, pad;
    bool bias;
};

void check_conv(const ConvCase& c, test::Tol tol = kConvTol) {
    INFO(c.name);
    Tensor x = randn({c.N, c.Cin, c.H, c.W}, true, 1), w = randn({c.Cout, c.Cin, c.kh, c.kw}, true, 2);
    Tensor b = c.bias ? randn({c.Cout}, true, 3) : Tensor();
    int stride = c.stride, pad = c.pad;
    on_both_paths([&] {
        check_parity(c.name, [stride, pad](auto& in) { return engine::conv2d(in[0], in[1], in[2], stride, pad); },
                     {x, w, b}, tol, tol);
    });
}

// Restores the conv2d scratch limit on scope exit.
struct ScratchLimit {
    int64_t saved;
    explicit ScratchLimit(int64_t floats) : saved(engine::cuda::set_conv2d_scratch_limit(floats)) {}
    ~ScratchLimit() { engine::cuda::set_conv2d_scratch_limit(saved); }
};

}  // namespace

TEST_CASE("cuda conv2d: stride, padding, bias, channel counts 1, 3, 7", "[cuda]") {
    check_conv({"k3 s1 p1 bias, 3 -> 7", 2, 3, 7, 7, 7, 3, 3, 1, 1, true});
    check_conv({"k3 s2 p1 no bias, 7 -> 3", 2, 7, 9, 9, 3, 3, 3, 2, 1, false});
    check_conv({"k5 s1 p2 bias, 1 -> 1", 1, 1, 8, 8, 1, 5, 5, 1, 2, true});
    check_conv({"k3 s1 p0 no bias, 3 -> 1", 3, 3, 6, 5, 1, 3, 3, 1, 0, false});
    check_conv({"k2 s3 p0 (pixels no window reads), 3 -> 7", 2, 3, 8, 8, 7, 2, 2, 3, 0, true});
    check_conv({"k3 s2 p2 (window wider than the image), 1 -> 3", 1, 1, 2, 3, 3, 3, 3, 2, 2, true});
    check_conv({"k3x1 s1 p1 non-square kernel, 3 -> 3", 2, 3, 5, 4, 3, 3, 1, 1, 1, true});
}

TEST_CASE("cuda conv2d: ViT patch embedding (kernel = stride = patch)", "[cuda]") {
    check_conv({"patch 4, 3 -> 7", 2, 3, 8, 8, 7, 4, 4, 4, 0, true});
    check_conv({"patch 2, 3 -> 7, no bias", 1, 3, 6, 6, 7, 2, 2, 2, 0, false});
    check_conv({"patch 3 on 7x7 (edge left over), 1 -> 3", 2, 1, 7, 7, 3, 3, 3, 3, 0, true});
}

TEST_CASE("cuda conv2d: 1x1 (pointwise shortcut) and 1x1 strided or padded", "[cuda]") {
    check_conv({"1x1, 7 -> 3, bias", 2, 7, 5, 5, 3, 1, 1, 1, 0, true});
    check_conv({"1x1, 1 -> 7, no bias", 3, 1, 4, 6, 7, 1, 1, 1, 0, false});
    check_conv({"1x1 stride 2, 3 -> 3", 2, 3, 5, 5, 3, 1, 1, 2, 0, true});
    check_conv({"1x1 pad 1, 3 -> 1", 1, 3, 3, 3, 1, 1, 1, 1, 1, true});
}

TEST_CASE("cuda conv2d: a 33x33 image", "[cuda]") {
    check_conv({"33x33 k3 s1 p1, 3 -> 4", 1, 3, 33, 33, 4, 3, 3, 1, 1, true}, kConvTolBig);
}

TEST_CASE("cuda conv2d: images in several scratch chunks", "[cuda]") {
    // K·P = 3·3·3 · 5·5 = 675 floats per image: a limit of 1500 floats gives chunks of 1 or 2 images
    // (5 images: chunks 2, 2, 1); the backward needs more per image, so its chunks are single images.
    ScratchLimit limit(1500);  // (the cuDNN pass of check_conv does not use the scratch)
    check_conv({"chunked k3 s1 p1, 3 -> 7", 5, 3, 5, 5, 7, 3, 3, 1, 1, true});
    ScratchLimit tiny(1);  // one image at a time, whatever the size
    check_conv({"one image per chunk, patch 2", 3, 3, 4, 4, 7, 2, 2, 2, 0, true});
    // The 1x1 forward is one batched GEMM (no chunks); its backward (K·P + Cout·P = 160 floats an
    // image) runs here one image per chunk: the pointwise branch with dW accumulated over chunks.
    check_conv({"chunked 1x1, 7 -> 3", 5, 7, 4, 4, 3, 1, 1, 1, 0, true});
}

TEST_CASE("cuda depthwise_conv2d: k 1, 3, 5, 9 with and without bias", "[cuda]") {
    struct Case { int64_t N, C, H, W, k; bool bias; };
    for (Case c : {Case{2, 3, 7, 7, 3, true}, Case{2, 3, 7, 7, 3, false}, Case{1, 7, 6, 9, 5, true},
                   Case{2, 1, 5, 5, 5, false}, Case{1, 3, 3, 4, 5, true}, Case{2, 3, 4, 4, 1, true},
                   Case{2, 2, 5, 6, 9, true}}) {
        INFO("N " << c.N << " C " << c.C << " H " << c.H << " W " << c.W << " k " << c.k << " bias " << c.bias);
        Tensor x = randn({c.N, c.C, c.H, c.W}, true, 1), w = randn({c.C, 1, c.k, c.k}, true, 2);
        Tensor b = c.bias ? randn({c.C}, true, 3) : Tensor();
        // The forward first (tight), then the gradients with their own tolerance.
        on_both_paths([&] {
            check_parity("depthwise_conv2d forward",
                         [](auto& in) { return engine::depthwise_conv2d(in[0], in[1], in[2]); },
                         {x.detach(), w.detach(), b.defined() ? b.detach() : b}, kDwFwdTol);
            check_parity("depthwise_conv2d", [](auto& in) { return engine::depthwise_conv2d(in[0], in[1], in[2]); },
                         {x, w, b}, kDwBwdTol, kDwBwdTol);
        });
    }
}

// Frozen filters: the op keeps no input, and the backward gets x = null (dw is not wanted).
TEST_CASE("cuda depthwise_conv2d: 33x33, frozen filters (dx only; dx and db)", "[cuda]") {
    Tensor x = randn({1, 2, 33, 33}, true, 1), w = randn({2, 1, 3, 3}, false, 2), b = randn({2}, true, 3);
    on_both_paths([&] {
        check_parity("depthwise 33x33 dx only", [](auto& in) { return engine::depthwise_conv2d(in[0], in[1]); },
                     {x, w}, kDwBwdTol, kDwBwdTol);
        check_parity("depthwise 33x33 dx and db",
                     [](auto& in) { return engine::depthwise_conv2d(in[0], in[1], in[2]); }, {x, w, b}, kDwBwdTol,
                     kDwBwdTol);
    });
}

// batch_norm with running statistics: each device gets its own copy of the same starting values,
// the forward runs on both (check_parity), and the running statistics must then agree.
static void check_batch_norm_once(const engine::Shape& shape, bool training, bool track, bool affine,
                                  float offset) {
    INFO("shape " << shape.str() << " training " << training << " track " << track << " affine " << affine);
    const int64_t C = shape[1];
    Tensor x = engine::add(randn(shape, false, 1), offset).detach().requires_grad_(true);
    Tensor w = affine ? test::rand_uniform({C}, 0.5f, 1.5f, true, 2) : Tensor();
    Tensor b = affine ? randn({C}, true, 3) : Tensor();
    Tensor rm_cpu, rv_cpu, rm_cuda, rv_cuda;
    if (track) {
        rm_cpu = randn({C}, false, 4);
        rv_cpu = test::rand_uniform({C}, 0.5f, 2.f, false, 5);
        rm_cuda = rm_cpu.to(Device::CUDA);
        rv_cuda = rv_cpu.to(Device::CUDA);
    }
    auto f = [&](const std::vector<Tensor>& in) {
        bool cuda = in[0].is_cuda();
        return engine::batch_norm(in[0], in[1], in[2], cuda ? rm_cuda : rm_cpu, cuda ? rv_cuda : rv_cpu, training,
                                  0.2f, 1e-3f);
    };
    check_parity("batch_norm", f, {x, w, b}, kBnFwdTol, kBnBwdTol);
    if (track) {
        REQUIRE(rm_cuda.is_cuda());
        REQUIRE(rv_cuda.is_cuda());
        test::require_close("running_mean", rm_cpu, rm_cuda, kBnFwdTol);
        test::require_close("running_var", rv_cpu, rv_cuda, kBnFwdTol);
    }
}

static void check_batch_norm(const engine::Shape& shape, bool training, bool track, bool affine, float offset = 0.f) {
    on_both_paths([&] { check_batch_norm_once(shape, training, track, affine, offset); });
}

TEST_CASE("cuda batch_norm: training, with and without running statistics", "[cuda]") {
    for (bool track : {true, false}) {
        check_batch_norm({3, 7, 5, 5}, true, track, true);
        check_batch_norm({7, 3}, true, track, true);
        check_batch_norm({4, 5, 33}, true, track, false);
        check_batch_norm({1, 3, 33}, true, track, true);  // one image: statistics over L only
    }
    check_batch_norm({2, 3, 4, 4}, true, true, true, 100.f);  // |mean| >> std: the two-pass variance
    check_batch_norm({2, 1, 17, 17}, true, true, true);       // S > one block: the 2-D grid forward
    check_batch_norm({2, 3, 1025}, true, true, true);         // S = 1025: several blocks along a row
    check_batch_norm({3, 1025}, true, true, true);            // C = 1025: a block per channel
}

TEST_CASE("cuda batch_norm: eval with running statistics", "[cuda]") {
    check_batch_norm({3, 7, 5, 5}, false, true, true);
    check_batch_norm({7, 3}, false, true, false);
    check_batch_norm({4, 5, 33}, false, true, true);
}

TEST_CASE("cuda conv: the same bits on every run (no atomics)", "[cuda]") {
    Tensor x = randn({3, 3, 9, 9}, false, 1).to(Device::CUDA).requires_grad_(true);
    Tensor w = randn({7, 3, 3, 3}, false, 2).to(Device::CUDA).requires_grad_(true);
    Tensor wd = randn({7, 1, 5, 5}, false, 3).to(Device::CUDA).requires_grad_(true);
    Tensor bn_w = randn({7}, false, 4).to(Device::CUDA).requires_grad_(true);
    Tensor none;
    on_both_paths([&] {
        std::vector<std::vector<float>> runs[2];
        for (int r = 0; r < 2; r++) {
            x.zero_grad();
            w.zero_grad();
            wd.zero_grad();
            bn_w.zero_grad();
            Tensor y = engine::batch_norm(engine::depthwise_conv2d(engine::conv2d(x, w, Tensor(), 1, 1), wd), bn_w,
                                          Tensor(), none, none, true);
            engine::sum(engine::mul(y, y)).backward();
            for (const Tensor& t : {y, x.grad(), w.grad(), wd.grad(), bn_w.grad()}) runs[r].push_back(t.to_vector());
        }
        for (size_t i = 0; i < runs[0].size(); i++) {
            INFO("tensor " << i);
            REQUIRE(runs[0][i] == runs[1][i]);
        }
    });
}

TEST_CASE("cuda conv: mixed devices are refused", "[cuda]") {
    using Catch::Contains;
    Tensor x = randn({1, 3, 4, 4}, false), w = randn({2, 3, 3, 3}, false), b = randn({2}, false);
    Tensor xd = x.to(Device::CUDA), wd = w.to(Device::CUDA);
    REQUIRE_THROWS_WITH(engine::conv2d(xd, w), Contains("conv2d") && Contains("cuda") && Contains("cpu"));
    REQUIRE_THROWS_WITH(engine::conv2d(xd, wd, b), Contains("conv2d") && Contains("cuda") && Contains("cpu"));

    Tensor dw = randn({3, 1, 3, 3}, false), db = randn({3}, false);
    REQUIRE_THROWS_WITH(engine::depthwise_conv2d(xd, dw), Contains("depthwise_conv2d") && Contains("cpu"));
    REQUIRE_THROWS_WITH(engine::depthwise_conv2d(xd, dw.to(Device::CUDA), db),
                        Contains("depthwise_conv2d") && Contains("cuda") && Contains("cpu"));

    Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
    Tensor none;
    REQUIRE_THROWS_WITH(engine::batch_norm(xd, Tensor(), Tensor(), rm, rv, true),
                        Contains("batch_norm") && Contains("cpu") && Contains("cuda"));
    REQUIRE_THROWS_WITH(engine::batch_norm(xd, db, Tensor(), none, none, true),
                        Contains("batch_norm") && Contains("cpu") && Contains("cuda"));
}
