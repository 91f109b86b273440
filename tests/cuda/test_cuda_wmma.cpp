// tests/cuda/test_cuda_wmma.cpp: the emulator's <mma.h> stand-in (engine/cuda/emu/include/mma.h,
// engine/cuda/emu/wmma.cpp) itself: a 16x16x8 TF32 product (every combination of A/B layouts and
// accumulator load/store layouts) against a loop over TF32-rounded inputs; a bf16 16x16x16 product;
// the fragment layout is a scramble, not row-major, and differs between matrix_a and the
// accumulator; and what CUDA documents as undefined is reported naming the kernel: a pointer not
// 32-byte aligned, an ldm not a multiple of 4 floats, lanes of one warp passing different pointers
// or ldm, a lane that skips the call.
//
// Only in the emulated build (the kernels here are compiled by g++ against the emulator).
#ifdef ENGINE_CUDA_EMU

#include <catch2/catch.hpp>
#include <mma.h>

#include <cmath>
#include <cstring>
#include <set>
#include <vector>
#include "engine/cuda/kernel.h"
#include "engine/cuda/runtime.h"

using Catch::Matchers::Contains;
namespace wmma = nvcuda::wmma;

namespace {

template <typename T>
struct Buf {
    T* p = nullptr;
    size_t n = 0;
    explicit Buf(size_t n_) : p(static_cast<T*>(engine::cuda::alloc(n_ * sizeof(T)))), n(n_) {}
    explicit Buf(const std::vector<T>& v) : Buf(v.size()) { engine::cuda::copy_to_device(p, v.data(), n * sizeof(T)); }
    ~Buf() { engine::cuda::free(p); }
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;
    std::vector<T> host() const {
        std::vector<T> v(n);
        engine::cuda::copy_to_host(v.data(), p, n * sizeof(T));
        return v;
    }
};

// d = a·b + c for one warp. a: 16x8 (row-major [16][lda], or col-major [8][lda]); b: 8x16 (row-major
// [8][ldb] or col-major [16][ldb]); c loaded and d stored with the given memory layouts, stride 16.
template <typename LA, typename LB>
__global__ void tf32_mma_kernel(const float* a, unsigned lda, const float* b, unsigned ldb, const float* c, bool c_col,
                                float* d, bool d_col) {
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
    wmma::load_matrix_sync(fa, a, lda);
    wmma::load_matrix_sync(fb, b, ldb);
    wmma::load_matrix_sync(fc, c, 16, c_col ? wmma::mem_col_major : wmma::mem_row_major);
    for (int i = 0; i < fa.num_elements; i++) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, d_col ? wmma::mem_col_major : wmma::mem_row_major);
}

__global__ void bf16_mma_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

// Each lane writes its fragment elements: lane l's x[e] to out[l * n + e].
__global__ void layout_kernel(const float* m, float* out_a, float* out_acc) {
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::load_matrix_sync(fa, m, 8);
    wmma::load_matrix_sync(acc, m, 16, wmma::mem_row_major);
    const int lane = (int)threadIdx.x % 32;
    for (int e = 0; e < fa.num_elements; e++) out_a[lane * fa.num_elements + e] = fa.x[e];
    for (int e = 0; e < acc.num_elements; e++) out_acc[lane * acc.num_elements + e] = acc.x[e];
}

// The planted bugs. mode 1: pointer 4 bytes off; 2: ldm 6; 3: odd lanes pass another pointer;
// 4: odd lanes another ldm; 5: lanes 16-31 skip the load.
__global__ void bad_wmma_kernel(const float* m, float* out, int mode) {
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    const int lane = (int)threadIdx.x % 32;
    const float* p = m;
    unsigned ldm = 16;
    if (mode == 1) p = m + 1;
    if (mode == 2) ldm = 6;
    if (mode == 3 && lane % 2) p = m + 8;
    if (mode == 4 && lane % 2) ldm = 24;
    if (mode == 5 && lane >= 16) return;
    wmma::load_matrix_sync(acc, p, ldm, wmma::mem_row_major);
    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

std::vector<float> values(size_t n, uint32_t seed) {
    std::vector<float> v(n);
    uint32_t s = seed;
    for (float& x : v) {
        s = s * 1664525u + 1013904223u;
        // Full 24-bit mantissas, so TF32 rounding changes them.
        x = ((float)(s >> 8) / 16777216.f - 0.5f) * 4.f;
    }
    return v;
}

float tf32(float x) { return wmma::__float_to_tf32(x); }

}  // namespace

TEST_CASE("wmma stand-in: a 16x16x8 TF32 product, every layout, against a loop", "[cuda][emulator][wmma]") {
    // a [16][8] logical, b [8][16], c [16][16]; padded strides (multiples of 4) in memory.
    std::vector<float> A = values(16 * 8, 1), B = values(8 * 16, 2), C = values(16 * 16, 3);
    std::vector<double> want(256);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double s = C[i * 16 + j];
            for (int k = 0; k < 8; k++) s += (double)tf32(A[i * 8 + k]) * (double)tf32(B[k * 16 + j]);
            want[i * 16 + j] = s;
        }
    bool any_rounding_visible = false;
    for (int layouts = 0; layouts < 16; layouts++) {
        const bool a_col = layouts & 1, b_col = layouts & 2, c_col = layouts & 4, d_col = layouts & 8;
        INFO("a " << (a_col ? "col" : "row") << " b " << (b_col ? "col" : "row") << " c " << (c_col ? "col" : "row")
                  << " d " << (d_col ? "col" : "row"));
        const unsigned lda = a_col ? 20 : 12, ldb = b_col ? 12 : 20;  // a col-major: [8][lda] holds column k
        std::vector<float> am(a_col ? 8 * lda : 16 * lda, NAN), bm(b_col ? 16 * ldb : 8 * ldb, NAN), cm(256);
        for (int i = 0; i < 16; i++)
            for (int k = 0; k < 8; k++) am[a_col ? k * lda + i : i * lda + k] = A[i * 8 + k];
        for (int k = 0; k < 8; k++)
            for (int j = 0; j < 16; j++) bm[b_col ? j * ldb + k : k * ldb + j] = B[k * 16 + j];
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) cm[c_col ? j * 16 + i : i * 16 + j] = C[i * 16 + j];
        Buf<float> da(am), db(bm), dc(cm), dd(256);
        auto launch = [&](auto kernel) { KERNEL_LAUNCH(kernel, 1, 32, 0, da.p, lda, db.p, ldb, dc.p, c_col, dd.p, d_col); };
        if (!a_col && !b_col) launch(tf32_mma_kernel<wmma::row_major, wmma::row_major>);
        if (a_col && !b_col) launch(tf32_mma_kernel<wmma::col_major, wmma::row_major>);
        if (!a_col && b_col) launch(tf32_mma_kernel<wmma::row_major, wmma::col_major>);
        if (a_col && b_col) launch(tf32_mma_kernel<wmma::col_major, wmma::col_major>);
        std::vector<float> d = dd.host();
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                const float got = d[d_col ? j * 16 + i : i * 16 + j];
                INFO("d[" << i << "][" << j << "]");
                REQUIRE(std::fabs(got - want[i * 16 + j]) <= 1e-5 * (1 + std::fabs(want[i * 16 + j])));
                double full = C[i * 16 + j];
                for (int k = 0; k < 8; k++) full += (double)A[i * 8 + k] * B[k * 16 + j];
                if (std::fabs(got - full) > 1e-4) any_rounding_visible = true;
            }
    }
    REQUIRE(any_rounding_visible);  // the inputs were rounded to TF32 (b without __float_to_tf32 too)
}

TEST_CASE("wmma stand-in: a 16x16x16 bf16 product", "[cuda][emulator][wmma]") {
    std::vector<float> A = values(256, 4), B = values(256, 5);
    std::vector<__nv_bfloat16> a(256), b(256);
    for (int i = 0; i < 256; i++) a[i] = __float2bfloat16(A[i]);
    // b col-major: column j of the logical [16][16] matrix is row j in memory.
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 16; j++) b[j * 16 + k] = __float2bfloat16(B[k * 16 + j]);
    Buf<__nv_bfloat16> da(a), db(b);
    Buf<float> dd(256);
    KERNEL_LAUNCH(bf16_mma_kernel, 1, 32, 0, da.p, db.p, dd.p);
    std::vector<float> d = dd.host();
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double s = 0;
            for (int k = 0; k < 16; k++) s += (double)__bfloat162float(a[i * 16 + k]) * __bfloat162float(b[j * 16 + k]);
            REQUIRE(std::fabs(d[i * 16 + j] - s) <= 1e-5 * (1 + std::fabs(s)));
        }
}

TEST_CASE("wmma stand-in: fragments are not row-major, and matrix_a differs from the accumulator",
          "[cuda][emulator][wmma]") {
    std::vector<float> m(256);
    for (int i = 0; i < 256; i++) m[i] = (float)i;
    Buf<float> dm(m), oa(32 * 4), oacc(32 * 8);
    KERNEL_LAUNCH(layout_kernel, 1, 32, 0, dm.p, oa.p, oacc.p);
    std::vector<float> a = oa.host(), acc = oacc.host();
    // matrix_a was loaded as [16][8] with ldm 8: element (r, c) is the value r·8 + c, the row-major
    // position. Every position exactly once, but not in row-major order.
    std::set<int> seen_a(a.begin(), a.end()), seen_acc(acc.begin(), acc.end());
    REQUIRE(seen_a.size() == 128);
    REQUIRE(*seen_a.rbegin() == 127);
    REQUIRE(seen_acc.size() == 256);
    int in_place_a = 0, same_as_acc = 0;
    for (int i = 0; i < 128; i++) in_place_a += a[i] == (float)i;
    for (int l = 0; l < 32; l++)
        for (int e = 0; e < 4; e++) same_as_acc += a[l * 4 + e] == acc[l * 8 + e];
    CHECK(in_place_a < 8);
    CHECK(same_as_acc < 8);
}

TEST_CASE("wmma stand-in: misaligned pointer, bad ldm, divergent lanes are errors", "[cuda][emulator][wmma]") {
    Buf<float> m(std::vector<float>(512, 1.f)), out(256);
    REQUIRE_NOTHROW(KERNEL_LAUNCH(bad_wmma_kernel, 1, 32, 0, m.p, out.p, 0));
    REQUIRE_THROWS_WITH(KERNEL_LAUNCH(bad_wmma_kernel, 1, 32, 0, m.p, out.p, 1),
                        Contains("bad_wmma_kernel") && Contains("load_matrix_sync") && Contains("32-byte) aligned"));
    REQUIRE_THROWS_WITH(KERNEL_LAUNCH(bad_wmma_kernel, 1, 32, 0, m.p, out.p, 2),
                        Contains("bad_wmma_kernel") && Contains("ldm 6") && Contains("multiple of 4"));
    REQUIRE_THROWS_WITH(KERNEL_LAUNCH(bad_wmma_kernel, 1, 32, 0, m.p, out.p, 3),
                        Contains("bad_wmma_kernel") && Contains("disagree") && Contains("same pointer"));
    REQUIRE_THROWS_WITH(KERNEL_LAUNCH(bad_wmma_kernel, 1, 32, 0, m.p, out.p, 4),
                        Contains("bad_wmma_kernel") && Contains("disagree"));
    REQUIRE_THROWS_WITH(KERNEL_LAUNCH(bad_wmma_kernel, 1, 32, 0, m.p, out.p, 5),
                        Contains("bad_wmma_kernel") && Contains("load_matrix_sync") && Contains("exited"));
    // The emulator is fine afterwards.
    REQUIRE_NOTHROW(KERNEL_LAUNCH(bad_wmma_kernel, 1, 64, 0, m.p, out.p, 0));
}

#endif  // ENGINE_CUDA_EMU
