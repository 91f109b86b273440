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
// bf16 (autocast style: only the GEMMs change): each GEMM rounds the elements it reads of its two
// fp32 inputs into packed bf16 scratch (Bf16Operand, round_bf16_kernel: round to nearest even, the
// rounding PyTorch's autocast applies too) and calls the GemmEx form with bf16 A and B, fp32 C and
// CUBLAS_COMPUTE_32F, so products are accumulated in fp32 and the output is fp32 like every other
// tensor. The scratch comes from the stream-ordered pool and is freed right after the call is
// queued: the pool hands it out again only to work queued later on the same stream. The
// conversion costs a read of 4 and a write of 2 bytes per element read, on every GEMM (a weight is
// converted again for each GEMM that uses it): the simplest correct design, not the fastest
// (docs/ROOFLINE.md weighs it). bf16_fast_gemm_enabled() (off by default) skips the pass: fp32
// A and B with CUBLAS_COMPUTE_32F_FAST_16BF, cuBLAS rounding inside its kernels.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include "engine/cuda/elementwise.h"
#include "engine/cuda/kernel.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/reduce.h"
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
void* g_workspace = nullptr;  // the handle's, shared with cuBLASLt's matmuls (one stream: never at once)
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
        g_workspace = workspace;
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

// A GEMM operand as the GEMM reads it: `batch` matrices of `rows` lines of `cols` elements, where
// `at` says (lines at.ld apart; matrix i at at.offset(i); one matrix shared by the batch where
// both strides are 0).
struct OperandShape {
    int64_t batch, rows, cols;
    BatchLayout at;
    bool shared() const { return at.stride == 0 && (at.group == 0 || at.group_stride == 0); }
};

// The source offset of element c of line l (line l is line l % rows of matrix l / rows).
template <typename Index>
__device__ inline int64_t operand_offset(Index line, Index c, Index rows, const BatchLayout& at) {
    const Index matrix = line / rows;
    return at.offset((int64_t)matrix) + (int64_t)(line - matrix * rows) * at.ld + (int64_t)c;
}

// out[l·out_ld + c] = bf16(in at line l, column c), round to nearest even. `Index` is uint32_t when
// every packed index is below 2^31: finding an element's line is then a 32-bit division, several
// times cheaper than a 64-bit one.
template <typename Index>
__global__ void round_bf16_kernel(const float* in, __nv_bfloat16* out, Index n, Index cols, Index rows, BatchLayout at,
                                  int64_t out_ld) {
    for (Index i = (Index)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (Index)blockDim.x * gridDim.x) {
        const Index line = i / cols, c = i - line * cols;
        out[(int64_t)line * out_ld + c] = __float2bfloat16(in[operand_offset(line, c, rows, at)]);
    }
}

// The float4 twin for lines of a multiple of 4 elements at 16-byte aligned offsets: 4 elements a
// thread (i counts groups of 4, cols4 a line's groups), stored as one 8-byte pair of bf16 pairs.
template <typename Index>
__global__ void round_bf16_kernel4(const float* in, __nv_bfloat16* out, Index n4, Index cols4, Index rows,
                                   BatchLayout at, int64_t out_ld) {
    for (Index i = (Index)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (Index)blockDim.x * gridDim.x) {
        const Index line = i / cols4, c = 4 * (i - line * cols4);
        const float4 x = *reinterpret_cast<const float4*>(in + operand_offset(line, c, rows, at));
        uint2 packed;
        packed.x = (unsigned)__bfloat16_as_ushort(__float2bfloat16(x.x)) |
                   ((unsigned)__bfloat16_as_ushort(__float2bfloat16(x.y)) << 16);
        packed.y = (unsigned)__bfloat16_as_ushort(__float2bfloat16(x.z)) |
                   ((unsigned)__bfloat16_as_ushort(__float2bfloat16(x.w)) << 16);
        *reinterpret_cast<uint2*>(out + (int64_t)line * out_ld + c) = packed;
    }
}

std::atomic<uint64_t> g_bf16_rounded{0};

// A GEMM operand rounded to bf16 into scratch: only the elements the GEMM reads, as [batch, rows,
// cols] with lines padded to a multiple of 8 elements (16 bytes: cuBLAS's fastest bf16 kernels
// want every line aligned; the padding is never read), one matrix when the source's is shared. A
// per-head operand, strided across a bigger tensor (one head's columns of a [B, T, 3·H·D]
// projection, one head of [B, H, T, T] probabilities), would otherwise pull the whole tensor
// through the conversion, once per head: 60 % of a bf16 ViT-Tiny step on an H100 (session 12).
// Freed (stream-ordered) on destruction.
struct Bf16Operand {
    __nv_bfloat16* p = nullptr;
    int64_t ld = 1, stride = 0;  // the copy's, for cuBLAS
    Bf16Operand(const float* src, OperandShape s) {
        ld = (s.cols + 7) / 8 * 8;
        stride = s.shared() ? 0 : s.rows * ld;
        if (s.batch <= 0 || s.rows <= 0 || s.cols <= 0) return;  // empty: a null operand
        const int64_t lines = (s.shared() ? 1 : s.batch) * s.rows, n = lines * s.cols;
        p = static_cast<__nv_bfloat16*>(alloc((size_t)(lines * ld) * sizeof(__nv_bfloat16)));
        g_bf16_rounded.fetch_add((uint64_t)n, std::memory_order_relaxed);
        const bool narrow = lines * ld <= (int64_t)INT32_MAX;  // (so i + the grid stride cannot wrap)
        const BatchLayout& at = s.at;
        if (s.cols % 4 == 0 && at.ld % 4 == 0 && at.stride % 4 == 0 && at.group_stride % 4 == 0 &&
            reinterpret_cast<uintptr_t>(src) % 16 == 0) {
            if (narrow)
                KERNEL_LAUNCH(round_bf16_kernel4<uint32_t>, blocks_for(n / 4), kBlockSize, 0, src, p,
                              (uint32_t)(n / 4), (uint32_t)(s.cols / 4), (uint32_t)s.rows, at, ld);
            else
                KERNEL_LAUNCH(round_bf16_kernel4<int64_t>, blocks_for(n / 4), kBlockSize, 0, src, p, n / 4,
                              s.cols / 4, s.rows, at, ld);
        } else if (narrow) {
            KERNEL_LAUNCH(round_bf16_kernel<uint32_t>, blocks_for(n), kBlockSize, 0, src, p, (uint32_t)n,
                          (uint32_t)s.cols, (uint32_t)s.rows, at, ld);
        } else {
            KERNEL_LAUNCH(round_bf16_kernel<int64_t>, blocks_for(n), kBlockSize, 0, src, p, n, s.cols, s.rows, at, ld);
        }
    }
    ~Bf16Operand() {
        if (p) engine::cuda::free(p);
    }
    Bf16Operand(const Bf16Operand&) = delete;
    Bf16Operand& operator=(const Bf16Operand&) = delete;
};

// A GEMM operand as cuBLAS gets it: rounded into packed bf16 scratch (Bf16Operand) where `packed`,
// else the fp32 data as it is (fp32 and TF32 GEMMs, and bf16 ones with bf16_fast_gemm_enabled,
// whose inputs cuBLAS rounds in its kernels). `at` is where its matrices are, elem their size.
struct GemmInput {
    Bf16Operand copy;
    const void* p;
    BatchLayout at;
    int64_t elem;
    GemmInput(bool packed, const float* src, const OperandShape& s)
        : copy(src, packed ? s : OperandShape{0, 0, 0, {1, 0}}), p(packed ? (const void*)copy.p : src),
          at(packed ? BatchLayout{copy.ld, copy.stride} : s.at), elem(packed ? 2 : 4) {}
};
// The element type and the compute type of the bf16 GEMMs' operands, packed or fast.
cudaDataType_t bf16_input_type(bool fast) { return fast ? CUDA_R_32F : CUDA_R_16BF; }
cublasComputeType_t bf16_compute(bool fast) { return fast ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F; }

}  // namespace

uint64_t bf16_rounded_elements() { return g_bf16_rounded.load(std::memory_order_relaxed); }

namespace {
std::atomic<int> g_bf16_fast{-1};  // -1: not decided yet (the environment is read at the first question)
}
bool bf16_fast_gemm_enabled() { return env_switch(g_bf16_fast, "INITLAB_BF16_GEMM_FAST", false); }
void set_bf16_fast_gemm(bool on) { g_bf16_fast.store(on ? 1 : 0, std::memory_order_relaxed); }

bool bf16_supported() {
    cudaDeviceProp p;
    check_cuda(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
    return p.major >= 8;
}

namespace {
// (below, with cuBLASLt)
bool lt_matmul(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               const OperandShape& a_shape, const float* B, const OperandShape& b_shape, float beta,
               const float* bias, float* C, BatchLayout lc, const std::string& where, const float* C_in = nullptr,
               bool bias_grad = false);
// A plain GEMM's operands: one matrix each, packed rows.
OperandShape plain_a(bool ta, int64_t M, int64_t K) { return {1, ta ? K : M, ta ? M : K, {ta ? M : K, 0}}; }
OperandShape plain_b(bool tb, int64_t N, int64_t K) { return {1, tb ? N : K, tb ? K : N, {tb ? K : N, 0}}; }
}  // namespace

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
    if (K > 0 && gemm_autotune_enabled() &&
        lt_matmul(ta, tb, 1, M, N, K, alpha, A, plain_a(ta, M, K), B, plain_b(tb, N, K), beta, nullptr, C, {N, 0},
                  at()))
        return;
    if (gemm_precision() == GemmPrecision::bf16) {
        const bool fast = bf16_fast_gemm_enabled();
        GemmInput a(!fast, A, plain_a(ta, M, K)), b(!fast, B, plain_b(tb, N, K));
        cublasStatus_t st = cublasGemmEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N,
                                         (int)M, (int)K, &alpha, b.p, bf16_input_type(fast), ld(b.at.ld), a.p,
                                         bf16_input_type(fast), ld(a.at.ld), &beta, C, CUDA_R_32F, ld(N),
                                         bf16_compute(fast), CUBLAS_GEMM_DEFAULT);
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
                     int64_t stride_c, int64_t ldc, float beta) {
    gemm_batched_layout(ta, tb, batch, M, N, K, A, {lda, stride_a}, B, {ldb, stride_b}, C, {ldc, stride_c}, beta);
}

namespace {

std::atomic<int> g_pointer_batch{-1};
std::atomic<uint64_t> g_pointer_batch_calls{0};

// A layout that is one stride anyway as one stride: groups of one, groups one stride apart, or a
// batch within one group.
BatchLayout one_stride_if_possible(BatchLayout l, int64_t batch) {
    if (l.group == 1) return {l.ld, l.group_stride};
    if (l.group && (batch <= l.group || l.group_stride == l.group * l.stride)) return {l.ld, l.stride};
    return l;
}

// The batch as cuBLAS's strided batched GEMM takes it: matrix i at i·stride. Call with g_mu held.
void strided_call(cublasHandle_t h, bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K,
                  const float* A, const OperandShape& a_shape, const float* B, const OperandShape& b_shape, float* C,
                  BatchLayout lc, float beta, const std::string& where) {
    const float alpha = 1.f;
    if (K > 0 && gemm_autotune_enabled() &&
        lt_matmul(ta, tb, batch, M, N, K, alpha, A, a_shape, B, b_shape, beta, nullptr, C, lc, where))
        return;
    if (gemm_precision() == GemmPrecision::bf16) {
        const bool fast = bf16_fast_gemm_enabled();
        GemmInput a(!fast, A, a_shape), b(!fast, B, b_shape);
        cublasStatus_t st = cublasGemmStridedBatchedEx(
            h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, b.p,
            bf16_input_type(fast), ld(b.at.ld), (long long)b.at.stride, a.p, bf16_input_type(fast), ld(a.at.ld),
            (long long)a.at.stride, &beta, C, CUDA_R_32F, ld(lc.ld), (long long)lc.stride, (int)batch,
            bf16_compute(fast), CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) check_cublas(st, "cublasGemmStridedBatchedEx", where);
        return;
    }
    // Strides are long long in cuBLAS: a stride of 0 reuses that operand for every batch entry.
    cublasStatus_t st = cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                  (int)N, (int)M, (int)K, &alpha, B, ld(b_shape.at.ld),
                                                  (long long)b_shape.at.stride, A, ld(a_shape.at.ld),
                                                  (long long)a_shape.at.stride, &beta, C, ld(lc.ld),
                                                  (long long)lc.stride, (int)batch);
    if (st != CUBLAS_STATUS_SUCCESS) check_cublas(st, "cublasSgemmStridedBatched", where);
}

// One operand's matrices for the address arrays: base bytes, where each matrix starts, element size.
struct MatrixAddresses {
    const char* base;
    BatchLayout at;
    int64_t elem;
};

// out[i], out[batch + i], out[2·batch + i]: the addresses of A's, B's and C's matrix i.
__global__ void batch_addresses_kernel(MatrixAddresses a, MatrixAddresses b, MatrixAddresses c, int64_t batch,
                                       uintptr_t* out) {
    GRID_STRIDE_LOOP(i, batch) {
        out[i] = reinterpret_cast<uintptr_t>(a.base + a.at.offset(i) * a.elem);
        out[batch + i] = reinterpret_cast<uintptr_t>(b.base + b.at.offset(i) * b.elem);
        out[2 * batch + i] = reinterpret_cast<uintptr_t>(c.base + c.at.offset(i) * c.elem);
    }
}

// The whole batch in one cuBLAS call from arrays of the matrices' addresses (pointer_batch_enabled).
// Under bf16 the operands are first rounded into packed scratch, one stride; C stays where it is.
// Call with g_mu held.
void pointer_call(cublasHandle_t h, bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K,
                  const float* A, const OperandShape& a_shape, const float* B, const OperandShape& b_shape, float* C,
                  BatchLayout lc, float beta, const std::string& where) {
    g_pointer_batch_calls.fetch_add(1, std::memory_order_relaxed);
    const float alpha = 1.f;
    const bool bf16 = gemm_precision() == GemmPrecision::bf16, fast = bf16 && bf16_fast_gemm_enabled();
    const GemmInput a(bf16 && !fast, A, a_shape), b(bf16 && !fast, B, b_shape);
    const MatrixAddresses am{(const char*)a.p, a.at, a.elem}, bm{(const char*)b.p, b.at, b.elem};
    Scratch<uintptr_t> addresses(3 * batch);
    KERNEL_LAUNCH(batch_addresses_kernel, blocks_for(batch), kBlockSize, 0, am, bm,
                  MatrixAddresses{(const char*)C, lc, 4}, batch, addresses.p);
    const void* const* a_list = reinterpret_cast<const void* const*>(addresses.p);
    const void* const* b_list = reinterpret_cast<const void* const*>(addresses.p + batch);
    void* const* c_list = reinterpret_cast<void* const*>(addresses.p + 2 * batch);
    cublasStatus_t st;
    if (bf16) {
        st = cublasGemmBatchedEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
                                 (int)K, &alpha, b_list, bf16_input_type(fast), ld(bm.at.ld), a_list,
                                 bf16_input_type(fast), ld(am.at.ld), &beta, c_list, CUDA_R_32F, ld(lc.ld), (int)batch,
                                 bf16_compute(fast), CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) check_cublas(st, "cublasGemmBatchedEx", where);
        return;
    }
    st = cublasSgemmBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                            &alpha, reinterpret_cast<const float* const*>(b_list), ld(bm.at.ld),
                            reinterpret_cast<const float* const*>(a_list), ld(am.at.ld), &beta,
                            reinterpret_cast<float* const*>(c_list), ld(lc.ld), (int)batch);
    if (st != CUBLAS_STATUS_SUCCESS) check_cublas(st, "cublasSgemmBatched", where);
}

}  // namespace

bool pointer_batch_enabled() { return env_switch(g_pointer_batch, "INITLAB_GEMM_POINTER_BATCH", false); }
void set_pointer_batch(bool on) { g_pointer_batch.store(on ? 1 : 0, std::memory_order_relaxed); }
uint64_t pointer_batch_calls() { return g_pointer_batch_calls.load(std::memory_order_relaxed); }

void gemm_batched_layout(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                         BatchLayout la, const float* B, BatchLayout lb, float* C, BatchLayout lc, float beta) {
    // Stored shapes: A is [M, K] ([K, M] transposed), B [K, N] ([N, K]), C [M, N]; packed rows
    // unless a leading dimension is given.
    const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    if (la.ld <= 0) la.ld = a_cols;
    if (lb.ld <= 0) lb.ld = b_cols;
    if (lc.ld <= 0) lc.ld = N;
    std::string where;
    auto at = [&]() -> const std::string& {
        if (where.empty()) where = shapes("gemm_batched", ta, tb, batch, M, N, K);  // (or _ld, _layout: same op)
        return where;
    };
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || batch > INT_MAX) {
        check_int(M, "M", at());
        check_int(N, "N", at());
        check_int(K, "K", at());
        check_int(batch, "batch", at());
    }
    if (la.ld > INT_MAX || lb.ld > INT_MAX || lc.ld > INT_MAX) {
        check_int(la.ld, "lda", at());
        check_int(lb.ld, "ldb", at());
        check_int(lc.ld, "ldc", at());
    }
    la = one_stride_if_possible(la, batch);
    lb = one_stride_if_possible(lb, batch);
    lc = one_stride_if_possible(lc, batch);
    const int64_t group = la.group ? la.group : lb.group ? lb.group : lc.group;
    for (const BatchLayout* l : {&la, &lb, &lc})
        if (l->group && (l->group != group || batch % group))
            fail(at() + ": the operands' groups differ (" + std::to_string(la.group) + ", " +
                 std::to_string(lb.group) + ", " + std::to_string(lc.group) + ") or do not divide the batch");
    if (M == 0 || N == 0 || batch == 0) return;
    profile::note_flops(2.0 * (double)batch * (double)M * (double)N * (double)K);
    std::lock_guard<std::mutex> lock(g_mu);
    cublasHandle_t h = handle(at());
    const OperandShape a_shape{batch, a_rows, a_cols, la}, b_shape{batch, b_rows, b_cols, lb};
    if (!group) {
        strided_call(h, ta, tb, batch, M, N, K, A, a_shape, B, b_shape, C, lc, beta, at());
        return;
    }
    if (pointer_batch_enabled()) {
        pointer_call(h, ta, tb, batch, M, N, K, A, a_shape, B, b_shape, C, lc, beta, at());
        return;
    }
    // One strided call per position g in the group, batched over the groups: matrix g of every
    // group, one group_stride apart (in a one-stride layout its stride times the group).
    auto over_groups = [group](const BatchLayout& l) {
        return BatchLayout{l.ld, l.group ? l.group_stride : l.stride * group};
    };
    const BatchLayout pa = over_groups(la), pb = over_groups(lb), pc = over_groups(lc);
    const int64_t groups = batch / group;
    for (int64_t g = 0; g < group; g++)
        strided_call(h, ta, tb, groups, M, N, K, A + g * la.stride, {groups, a_rows, a_cols, pa}, B + g * lb.stride,
                     {groups, b_rows, b_cols, pb}, C + g * lc.stride, pc, beta, at());
}

// ---------------------------------------------------------------------------------------------
// gemm_bias: cuBLASLt's matmul with its bias epilogue, where it is on (lt_bias_enabled). In the
// column-major view (top of this file) the row-major C[M,N] is Cᵀ[N,M], so the bias of C's columns
// is the bias of Cᵀ's rows: the epilogue's vector of D's row count. The descriptors are made per
// call (host work only, a few µs; a captured step replays without them).

namespace {

cublasLtHandle_t g_lt = nullptr;
std::atomic<uint64_t> g_lt_bias_calls{0};
std::atomic<int> g_lt_bias{-1};  // -1: not decided yet (the environment is read at the first question)

// Owns cuBLASLt descriptors until the call returns.
struct LtDescriptors {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~LtDescriptors() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

// The largest power of two up to 256 that divides p's address: the alignment cuBLASLt may assume
// of an operand (it assumes 256 bytes unless its preference says less).
uint32_t alignment_of(const void* p) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(p);
    uint32_t align = 256;
    while (align > 1 && address % align) align >>= 1;
    return align;
}

// Where a batch's matrices are, for cuBLASLt: one stride apart (elements), `count` of them.
struct LtBatch {
    int64_t count = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

// The alignment cuBLASLt may assume of every matrix of an operand: its address's, and its
// stride's (of `elem` bytes) where there is more than one.
uint32_t batch_alignment(const void* p, int64_t stride, size_t elem, int64_t count) {
    const uint32_t first = alignment_of(p);
    if (count <= 1 || stride == 0) return first;
    return std::min(first, alignment_of(reinterpret_cast<const void*>((uintptr_t)stride * elem)));
}

// cuBLASLt's descriptors of the row-major C[M,N] = op(A)·op(B) (+ bias where given; with bias_grad,
// the bias pointer receives instead the sums of op(A) over K, cuBLASLt's BGRADB), batched as
// `batch` says; the preference allows the workspace and says how aligned A, B and C are (`align`:
// batch_alignment of each). False where cuBLASLt declines a descriptor.
bool lt_describe(LtDescriptors& d, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                 cudaDataType_t type, cublasComputeType_t compute, const float* bias, bool bias_grad, int64_t ldc,
                 const LtBatch& batch, const std::array<uint32_t, 3>& align) {
    if (cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return false;
    // The first operand is B (its transpose flag as given), the second A (see the top of the file).
    const int32_t op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    // (our A is cuBLASLt's second operand, B: its bias gradient is BGRADB's, over D's columns)
    const uint32_t epilogue = !bias      ? CUBLASLT_EPILOGUE_DEFAULT
                              : bias_grad ? CUBLASLT_EPILOGUE_BGRADB
                                          : CUBLASLT_EPILOGUE_BIAS;
    if (cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first) ||
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second) ||
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue) ||
        (bias && cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias)))
        return false;
    // Column-major layouts: the first operand N×K (K×N stored when transposed), the second K×M
    // (M×K), the output N×M.
    if (cublasLtMatrixLayoutCreate(&d.a, type, tb ? K : N, tb ? N : K, ldb) ||
        cublasLtMatrixLayoutCreate(&d.b, type, ta ? M : K, ta ? K : M, lda) ||
        cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, N, M, ldc) || cublasLtMatmulPreferenceCreate(&d.pref))
        return false;
    if (batch.count > 1) {
        const int32_t count = (int32_t)batch.count;
        const int64_t strides[3] = {batch.stride_b, batch.stride_a, batch.stride_c};
        const cublasLtMatrixLayout_t layouts[3] = {d.a, d.b, d.c};
        for (int i = 0; i < 3; i++)
            if (cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count) ||
                cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                                 sizeof strides[i]))
                return false;
    }
    const uint64_t workspace_bytes = kCublasWorkspaceBytes;
    const uint32_t align_first = align[1], align_second = align[0], align_c = align[2];
    return !(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                  sizeof workspace_bytes) ||
             cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_first,
                                                  sizeof align_first) ||
             cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_second,
                                                  sizeof align_second) ||
             cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                  sizeof align_c) ||
             cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                  sizeof align_c));
}

// Autotuning (gemm_autotune_enabled): the first time a shape comes outside a graph capture, each
// of up to kTuneCandidates algorithms of cuBLASLt's heuristic runs once untimed and kTuneRuns
// times timed by events on the stream, and the fastest is kept for the shape for the rest of the
// process. The key holds everything the heuristic sees: the shape, batch, row strides and batch
// strides, transposes, precision, whether C is read or a bias added, and the operands' alignments.
constexpr int kTuneCandidates = 8, kTuneRuns = 3;
struct TuneKey {
    std::array<int64_t, 11> sizes;  // M, N, K, lda, ldb, ldc, batch, its three strides, mode
    std::array<uint32_t, 7> flags;  // ta, tb, C read, bias (1) or its gradient (2), the alignments of A, B, C
    bool operator<(const TuneKey& o) const { return std::tie(sizes, flags) < std::tie(o.sizes, o.flags); }
};
std::map<TuneKey, cublasLtMatmulAlgo_t> g_tuned;
std::atomic<int> g_autotune{-1};
std::atomic<uint64_t> g_tunings{0}, g_tuned_calls{0};

// Device milliseconds of `runs` calls of work on the stream, after one untimed; a negative number
// where a call fails (the candidate is then passed over).
float time_on_stream(const std::function<cublasStatus_t()>& work, int runs) {
    if (work() != CUBLAS_STATUS_SUCCESS) return -1.f;
    cudaEvent_t start, stop;
    check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
    check_cuda(cudaEventRecord(start, stream()), "cudaEventRecord");
    bool ok = true;
    for (int i = 0; i < runs && ok; i++) ok = work() == CUBLAS_STATUS_SUCCESS;
    check_cuda(cudaEventRecord(stop, stream()), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.f;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ok ? ms : -1.f;
}

// C = alpha·op(A)·op(B) + beta·C (+ bias [N] on every row, where given; with bias_grad, bias [M]
// receives the sums of op(A) over K instead, one matrix only), `batch` of them (the
// shapes' and lc's strides), through cuBLASLt (C_in, where given, is read for beta·C instead of C:
// cuBLASLt's C and D apart, both in lc's layout) in the current precision (bf16: the operands
// rounded into packed scratch, or with bf16_fast_gemm_enabled handed over as fp32): the tuned
// algorithm where gemm_autotune_enabled, else the heuristic's first. False where cuBLASLt declines
// the shapes or types (the caller then takes cuBLAS); errors of the matmul itself throw. Call with
// g_mu held.
bool lt_matmul(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               const OperandShape& a_shape, const float* B, const OperandShape& b_shape, float beta,
               const float* bias, float* C, BatchLayout lc, const std::string& where, const float* C_in,
               bool bias_grad) {
    if (!g_lt) check_cublas(cublasLtCreate(&g_lt), "cublasLtCreate", where);
    const float* c_in = C_in ? C_in : C;
    const GemmPrecision p = gemm_precision();
    const bool bf16 = p == GemmPrecision::bf16, fast = bf16 && bf16_fast_gemm_enabled(), packed = bf16 && !fast;
    const GemmInput in_a(packed, A, a_shape), in_b(packed, B, b_shape);
    const void* a = in_a.p;
    const void* b = in_b.p;
    const int64_t lda = in_a.at.ld, ldb = in_b.at.ld;
    const LtBatch lt_batch{batch, in_a.at.stride, in_b.at.stride, lc.stride};
    const cublasComputeType_t compute = bf16                        ? bf16_compute(fast)
                                        : p == GemmPrecision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                   : CUBLAS_COMPUTE_32F;
    const cudaDataType_t type = packed ? CUDA_R_16BF : CUDA_R_32F;
    const std::array<uint32_t, 3> align{batch_alignment(a, lt_batch.stride_a, in_a.elem, batch),
                                        batch_alignment(b, lt_batch.stride_b, in_b.elem, batch),
                                        std::min(batch_alignment(C, lc.stride, 4, batch),
                                                 batch_alignment(c_in, lc.stride, 4, batch))};
    LtDescriptors d;
    if (!lt_describe(d, ta, tb, M, N, K, lda, ldb, type, compute, bias, bias_grad, lc.ld, lt_batch, align))
        return false;
    auto run = [&](const cublasLtMatmulAlgo_t& algo) {
        return cublasLtMatmul(g_lt, d.op, &alpha, b, d.a, a, d.b, &beta, c_in, d.c, C, d.c, &algo, g_workspace,
                              kCublasWorkspaceBytes, stream());
    };
    const bool tune = gemm_autotune_enabled();
    const TuneKey key{{M, N, K, lda, ldb, lc.ld, batch, lt_batch.stride_a, lt_batch.stride_b, lt_batch.stride_c,
                       2 * (int64_t)p + (fast ? 1 : 0)},
                      {ta, tb, beta != 0.f, bias ? (bias_grad ? 2u : 1u) : 0u, align[0], align[1], align[2]}};
    const auto tuned = tune ? g_tuned.find(key) : g_tuned.end();
    cublasLtMatmulAlgo_t algo;
    if (tuned != g_tuned.end()) {
        algo = tuned->second;
    } else {
        cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
        int found = 0;
        const int want = tune && !capturing() ? kTuneCandidates : 1;
        if (cublasLtMatmulAlgoGetHeuristic(g_lt, d.op, d.a, d.b, d.c, d.c, d.pref, want, results, &found) ||
            found == 0)
            return false;
        algo = results[0].algo;
        if (want > 1) {  // time the candidates on C, its values kept aside where they are read
            const int64_t span = (batch - 1) * lc.stride + (M - 1) * lc.ld + N;
            Scratch<float> kept(beta != 0.f && c_in == C ? span : 0);
            if (kept.p) copy_on_device(kept.p, C, sizeof(float) * (size_t)span);
            float best = INFINITY;
            for (int i = 0; i < found; i++) {
                if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
                const float ms = time_on_stream([&] { return run(results[i].algo); }, kTuneRuns);
                if (ms >= 0.f && ms < best) best = ms, algo = results[i].algo;
            }
            if (kept.p) copy_on_device(C, kept.p, sizeof(float) * (size_t)span);
            g_tuned[key] = algo;
            g_tunings.fetch_add(1, std::memory_order_relaxed);
        }
    }
    if (tune) g_tuned_calls.fetch_add(1, std::memory_order_relaxed);
    check_cublas(run(algo),
                 !bias ? "cublasLtMatmul" : bias_grad ? "cublasLtMatmul (bias gradient epilogue)"
                                                      : "cublasLtMatmul (bias epilogue)",
                 where);
    return true;
}

}  // namespace

bool gemm_autotune_enabled() { return env_switch(g_autotune, "INITLAB_GEMM_AUTOTUNE", false); }
void set_gemm_autotune(bool on) { g_autotune.store(on ? 1 : 0, std::memory_order_relaxed); }
GemmAutotuneStats gemm_autotune_stats() {
    return {g_tunings.load(std::memory_order_relaxed), g_tuned_calls.load(std::memory_order_relaxed)};
}

bool lt_bias_enabled() { return env_switch(g_lt_bias, "INITLAB_LT_BIAS", false); }
void set_lt_bias(bool on) { g_lt_bias.store(on ? 1 : 0, std::memory_order_relaxed); }

void gemm_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, const float* B, const float* bias,
               float* C, const float* residual) {
    if (bias && M > 0 && N > 0 && K > 0 && M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && lt_bias_enabled()) {
        std::string where;
        auto at = [&]() -> const std::string& {
            if (where.empty()) where = shapes("gemm_bias", ta, tb, -1, M, N, K);
            return where;
        };
        bool done = false;
        {
            std::lock_guard<std::mutex> lock(g_mu);
            handle(at());  // the workspace, and the math mode for the fallback
            // with a residual: D = op(A)·op(B) + bias + residual, cuBLASLt's C the residual, D apart
            done = lt_matmul(ta, tb, 1, M, N, K, 1.f, A, plain_a(ta, M, K), B, plain_b(tb, N, K), residual ? 1.f : 0.f,
                             bias, C, {N, 0}, at(), residual);
        }
        if (done) {
            g_lt_bias_calls.fetch_add(1, std::memory_order_relaxed);
            profile::note_flops(2.0 * (double)M * (double)N * (double)K);
            return;
        }
    }
    bias_rows(bias, C, M, N, residual);
    gemm(ta, tb, M, N, K, 1.f, A, B, 1.f, C);
}

void gemm_dbias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float beta,
                float* C, float* dbias) {
    // cuBLASLt sums the operand it reads: fp32 ones only (not bf16 copies, whose sums would lose bits)
    const bool packed = gemm_precision() == GemmPrecision::bf16 && !bf16_fast_gemm_enabled();
    if (!packed && M > 0 && N > 0 && K > 0 && M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && lt_bias_enabled()) {
        const std::string where = shapes("gemm_dbias", ta, tb, -1, M, N, K);
        bool done = false;
        {
            std::lock_guard<std::mutex> lock(g_mu);
            handle(where);
            done = lt_matmul(ta, tb, 1, M, N, K, 1.f, A, plain_a(ta, M, K), B, plain_b(tb, N, K), beta, dbias, C,
                             {N, 0}, where, nullptr, true);
        }
        if (done) {
            g_lt_bias_calls.fetch_add(1, std::memory_order_relaxed);
            profile::note_flops(2.0 * (double)M * (double)N * (double)K);
            return;
        }
    }
    gemm(ta, tb, M, N, K, 1.f, A, B, beta, C);
    // op(A) [M, K]: A stored [K, M] (ta) sums over its rows, [M, K] over its columns
    if (ta)
        sum_dim(A, dbias, 1, K, M);
    else
        sum_dim(A, dbias, M, K, 1);
}

uint64_t lt_bias_calls() { return g_lt_bias_calls.load(std::memory_order_relaxed); }

}  // namespace engine::cuda
