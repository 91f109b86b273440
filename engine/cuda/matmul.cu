// engine/cuda/matmul.cu: GEMMs through cuBLAS with the CPU's row-major interface (engine/cuda/matmul.h).
//
// Layout: cuBLAS is column-major, and a row-major [R, C] matrix is, read column-major, its
// transpose [C, R] with leading dimension C. So the row-major C[M,N] = op(A)·op(B) is computed as
// the column-major Cᵀ[N,M] = op(B)ᵀ·op(A)ᵀ: cuBLAS gets B as its first operand and A as its second,
// m = N, n = M, k = K, each with its own transpose flag unchanged, and the leading dimensions are
// the stored row lengths (B: N, or K when transposed; A: K, or M when transposed; C: N).
//
// One cuBLAS handle for the process, created on first use, bound to the backend's stream (so
// GEMMs are ordered with the kernels), never destroyed (its destruction at exit could run after the
// CUDA runtime has torn down). Its math mode follows gemm_precision(): TF32 tensor-op math for
// tf32, cuBLAS's default otherwise, re-applied whenever the flag changed since the last GEMM.
//
// bf16 (autocast style: only the GEMMs change): each GEMM rounds its two fp32 inputs into bf16
// scratch (round_bf16_kernel, round to nearest even, the rounding PyTorch's autocast applies too)
// and calls the GemmEx form with bf16 A and B, fp32 C and CUBLAS_COMPUTE_32F, so products are
// accumulated in fp32 and the output is fp32 like every other tensor. The scratch comes from the
// stream-ordered pool and is freed right after the call is queued: the pool hands it out again
// only to work queued later on the same stream. The conversion costs a read of 4 and a write of 2
// bytes per input element on every GEMM (a weight is converted again for each GEMM that uses it):
// the simplest correct design, not the fastest (docs/ROOFLINE.md weighs it).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <climits>
#include <mutex>
#include "engine/cuda/kernel.h"
#include "engine/cuda/matmul.h"
#include "engine/profile.h"

namespace engine::cuda {

namespace {

std::string shapes(const char* fn, bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K) {
    std::string s = std::string(fn) + " (M=" + std::to_string(M) + ", N=" + std::to_string(N) + ", K=" + std::to_string(K);
    if (batch >= 0) s += ", batch=" + std::to_string(batch);
    s += std::string(", trans_a=") + (ta ? "true" : "false") + ", trans_b=" + (tb ? "true" : "false") + ")";
    return s;
}

void check_cublas(cublasStatus_t st, const char* call, const std::string& where) {
    if (st != CUBLAS_STATUS_SUCCESS)
        fail(where + ": " + call + " failed: " + cublasGetStatusName(st) + ": " + cublasGetStatusString(st));
}

// cuBLAS takes int sizes and leading dimensions: refuse what does not fit rather than wrap.
void check_int(int64_t v, const char* what, const std::string& where) {
    if (v > INT_MAX)
        fail(where + ": " + what + " = " + std::to_string(v) + " exceeds cuBLAS's int limit " + std::to_string(INT_MAX) +
             " (split the product)");
}

constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

std::mutex g_mu;  // one handle: GEMMs from several host threads take turns
cublasHandle_t g_handle = nullptr;
int g_applied_tf32 = -1;  // math mode last set on the handle (-1: none yet)

// The handle, created on first use, with the math mode of the current precision. Call with g_mu held.
cublasHandle_t handle(const std::string& where) {
    if (!g_handle) {
        cublasHandle_t h = nullptr;
        check_cublas(cublasCreate(&h), "cublasCreate", where);
        check_cublas(cublasSetStream(h, stream()), "cublasSetStream", where);
        // A workspace of our own, set after the stream (setting the stream resets it): without
        // one, cuBLAS takes workspace from a pool it cannot grow during graph capture and may pick
        // other kernels there (NVIDIA's advice for graphs), so a captured step could sum in another
        // order than the eager one. (The 1-ulp train_lm --cuda-graph on/off difference seen on an
        // H200 came back with this in place; its cause was the embedding's atomics: shape.cu's
        // index_add.) 32 MiB is cuBLAS's own default for Hopper. Plain cudaMalloc: the first GEMM
        // is never inside a capture (GraphStep runs an eager step first), and the buffer lives as
        // long as the handle, i.e. the process.
        void* workspace = nullptr;
        check_cuda(cudaMalloc(&workspace, kCublasWorkspaceBytes), "cudaMalloc (cuBLAS workspace)");
        check_cublas(cublasSetWorkspace(h, workspace, kCublasWorkspaceBytes), "cublasSetWorkspace", where);
        g_handle = h;
    }
    // bf16 GEMMs name their compute type themselves; the math mode matters only to cublasSgemm.
    int want = gemm_precision() == GemmPrecision::tf32 ? 1 : 0;
    if (want != g_applied_tf32) {
        check_cublas(cublasSetMathMode(g_handle, want ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                     "cublasSetMathMode", where);
        g_applied_tf32 = want;
    }
    return g_handle;
}

int ld(int64_t v) { return (int)(v > 1 ? v : 1); }  // cuBLAS wants leading dimensions >= 1 even for empty operands

__global__ void round_bf16_kernel(const float* in, __nv_bfloat16* out, int64_t n) {
    GRID_STRIDE_LOOP(i, n) out[i] = __float2bfloat16(in[i]);  // round to nearest even
}

// An operand rounded to bf16 in scratch device memory, same layout; `n` elements from `src`
// (n <= 0: nothing, a null pointer, as for an empty operand). Freed (stream-ordered) on destruction.
struct Bf16Copy {
    __nv_bfloat16* p = nullptr;
    Bf16Copy(const float* src, int64_t n) {
        if (n <= 0) return;
        p = static_cast<__nv_bfloat16*>(alloc((size_t)n * sizeof(__nv_bfloat16)));
        KERNEL_LAUNCH(round_bf16_kernel, blocks_for(n), kBlockSize, 0, src, p, n);
    }
    ~Bf16Copy() {
        if (p) engine::cuda::free(p);
    }
    Bf16Copy(const Bf16Copy&) = delete;
    Bf16Copy& operator=(const Bf16Copy&) = delete;
};

// Elements a batched operand spans: `batch` matrices of rows×cols elements with row stride ld
// (>= cols), `stride` apart (0: one shared matrix). Empty or negative sizes give 0: nothing to
// convert (cuBLAS refuses negatives).
int64_t span(int64_t batch, int64_t rows, int64_t cols, int64_t stride, int64_t ld) {
    if (batch <= 0 || rows <= 0 || cols <= 0) return 0;
    return stride * (batch - 1) + (rows - 1) * ld + cols;
}

}  // namespace

bool bf16_supported() {
    cudaDeviceProp p;
    check_cuda(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
    return p.major >= 8;
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, const float* B, float beta,
          float* C) {
    std::string where;  // built lazily: only on the error paths
    auto at = [&]() -> const std::string& {
        if (where.empty()) where = shapes("gemm", ta, tb, -1, M, N, K);
        return where;
    };
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX) {
        check_int(M, "M", at());
        check_int(N, "N", at());
        check_int(K, "K", at());
    }
    if (M == 0 || N == 0) return;
    profile::note_flops(2.0 * (double)M * (double)N * (double)K);
    std::lock_guard<std::mutex> lock(g_mu);
    cublasHandle_t h = handle(at());
    if (gemm_precision() == GemmPrecision::bf16) {
        Bf16Copy a(A, span(1, M, K, 0, K)), b(B, span(1, K, N, 0, N));
        cublasStatus_t st = cublasGemmEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N,
                                         (int)M, (int)K, &alpha, b.p, CUDA_R_16BF, ld(tb ? K : N), a.p, CUDA_R_16BF,
                                         ld(ta ? M : K), &beta, C, CUDA_R_32F, ld(N), CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) check_cublas(st, "cublasGemmEx", at());
        return;
    }
    // Negative sizes reach cuBLAS, which refuses them with CUBLAS_STATUS_INVALID_VALUE.
    cublasStatus_t st = cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
                                    (int)K, &alpha, B, ld(tb ? K : N), A, ld(ta ? M : K), &beta, C, ld(N));
    if (st != CUBLAS_STATUS_SUCCESS) check_cublas(st, "cublasSgemm", at());
}

void gemm_batched(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A, int64_t stride_a,
                  const float* B, int64_t stride_b, float* C, int64_t stride_c) {
    gemm_batched_ld(ta, tb, batch, M, N, K, A, stride_a, 0, B, stride_b, 0, C, stride_c, 0);
}

void gemm_batched_ld(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                     int64_t stride_a, int64_t lda, const float* B, int64_t stride_b, int64_t ldb, float* C,
                     int64_t stride_c, int64_t ldc) {
    // Stored shapes: A is [M, K] ([K, M] transposed), B [K, N] ([N, K]), C [M, N]; packed rows
    // unless a leading dimension is given.
    const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    if (lda <= 0) lda = a_cols;
    if (ldb <= 0) ldb = b_cols;
    if (ldc <= 0) ldc = N;
    std::string where;
    auto at = [&]() -> const std::string& {
        if (where.empty()) where = shapes("gemm_batched", ta, tb, batch, M, N, K);  // (or _ld: same op)
        return where;
    };
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || batch > INT_MAX) {
        check_int(M, "M", at());
        check_int(N, "N", at());
        check_int(K, "K", at());
        check_int(batch, "batch", at());
    }
    if (lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX) {
        check_int(lda, "lda", at());
        check_int(ldb, "ldb", at());
        check_int(ldc, "ldc", at());
    }
    if (M == 0 || N == 0 || batch == 0) return;
    profile::note_flops(2.0 * (double)batch * (double)M * (double)N * (double)K);
    const float alpha = 1.f, beta = 0.f;
    std::lock_guard<std::mutex> lock(g_mu);
    cublasHandle_t h = handle(at());
    if (gemm_precision() == GemmPrecision::bf16) {
        // The bf16 copies keep the layout, so the same strides (in elements) address them.
        Bf16Copy a(A, span(batch, a_rows, a_cols, stride_a, lda)), b(B, span(batch, b_rows, b_cols, stride_b, ldb));
        cublasStatus_t st = cublasGemmStridedBatchedEx(
            h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, b.p,
            CUDA_R_16BF, ld(ldb), (long long)stride_b, a.p, CUDA_R_16BF, ld(lda), (long long)stride_a, &beta, C,
            CUDA_R_32F, ld(ldc), (long long)stride_c, (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) check_cublas(st, "cublasGemmStridedBatchedEx", at());
        return;
    }
    // Strides are long long in cuBLAS: a stride of 0 reuses that operand for every batch entry.
    cublasStatus_t st = cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                  (int)N, (int)M, (int)K, &alpha, B, ld(ldb), (long long)stride_b, A,
                                                  ld(lda), (long long)stride_a, &beta, C, ld(ldc), (long long)stride_c,
                                                  (int)batch);
    if (st != CUBLAS_STATUS_SUCCESS) check_cublas(st, "cublasSgemmStridedBatched", at());
}

}  // namespace engine::cuda
