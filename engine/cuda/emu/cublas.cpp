// engine/cuda/emu/cublas.cpp: the emulator's cuBLAS (see include/cublas_v2.h): argument checks as
// cuBLAS documents them, then the reference column-major sgemm (OpenBLAS's cblas_sgemm). The bf16
// GemmEx forms widen their bf16 operands to fp32 first and then take the same path; so does
// cuBLASLt's matmul (include/cublasLt.h, at the end of this file), then adds its bias epilogue.
#include "cublas_v2.h"
#include "cublasLt.h"
#include "internal.h"

#include <cblas.h>

#include <climits>
#include <cstdint>
#include <cstring>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

struct cublasContext {
    cudaStream_t stream = nullptr;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
    void* workspace = nullptr;  // null: cuBLAS's own pool (the stand-in needs none either way)
    size_t workspace_bytes = 0;
};

cublasStatus_t cublasCreate(cublasHandle_t* handle) { *handle = new cublasContext; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy(cublasHandle_t handle) { delete handle; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    h->workspace = nullptr;  // as cuBLAS documents: setting the stream resets the workspace
    h->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}
// cuBLAS wants device memory aligned to 256 bytes (or null and 0 for its own pool).
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void* workspace, size_t bytes) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (workspace ? (reinterpret_cast<uintptr_t>(workspace) % 256 != 0 || !emu::is_live_allocation(workspace))
                  : bytes != 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->workspace = workspace;
    h->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t* mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    *mode = h->math;
    return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "success";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
        case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
        case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    }
    return "unknown status";
}

namespace {

// A column-major rows×cols operand with leading dimension ld (elements of `elem` bytes) lies in
// device memory.
void check_operand(const char* call, const char* name, const void* p, int rows, int cols, int ld, size_t elem = 4) {
    if (rows == 0 || cols == 0) return;
    const char* last = static_cast<const char*>(p) + ((size_t)(cols - 1) * ld + (rows - 1)) * elem;
    if (!emu::is_device_pointer(p) || !emu::is_device_pointer(last))
        throw emu::Error(std::string("CUDA emulator: ") + call + ": operand " + name + " (" + std::to_string(rows) + "x" +
                         std::to_string(cols) + ", ld " + std::to_string(ld) + ") is not (all) in device memory");
}

// How a GEMM rounds its fp32 inputs: not (fp32), to TF32 (TF32 tensor-op math), to bf16
// (CUBLAS_COMPUTE_32F_FAST_16BF).
enum class Rounding { none, tf32, bf16 };

float to_bf16(float x) {  // round to nearest even on the top 16 bits (finite values; NaN stays NaN)
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&x, &u, 4);
    return x;
}

std::vector<float> rounded_copy(const float* p, int rows, int cols, int ld, Rounding how) {
    std::vector<float> out((size_t)ld * (cols - 1) + rows);
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows; r++) {
            const float x = p[(size_t)c * ld + r];
            out[(size_t)c * ld + r] = how == Rounding::tf32 ? emu::to_tf32(x) : to_bf16(x);
        }
    return out;
}

// Widen a column-major rows×cols bf16 operand to fp32, same layout (exact: bf16 is the top half of
// an fp32). The raw two-byte elements are read, so the data really has to be bf16.
std::vector<float> widened_bf16(const void* p, int rows, int cols, int ld) {
    const uint16_t* h = static_cast<const uint16_t*>(p);
    std::vector<float> out((size_t)ld * (cols - 1) + rows);
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows; r++) {
            uint32_t u = (uint32_t)h[(size_t)c * ld + r] << 16;
            std::memcpy(&out[(size_t)c * ld + r], &u, 4);
        }
    return out;
}

struct Dims {  // the stored rows × cols of A and B (column-major) for these transposes
    int a_rows, a_cols, b_rows, b_cols;
    Dims(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k)
        : a_rows(ta == CUBLAS_OP_N ? m : k), a_cols(ta == CUBLAS_OP_N ? k : m), b_rows(tb == CUBLAS_OP_N ? k : n),
          b_cols(tb == CUBLAS_OP_N ? n : k) {}
};

// The widest vector, in bytes (16, 8, 4 or 2), that every operand of a GEMM allows: each matrix's
// address, its leading dimension and its extent along the leading dimension (its rows, column-major)
// must be multiples of it, and so must the batch strides. cuBLAS picks its kernels by this: on the
// H100 (session 12) every GEMM with an extent of 257 there ran in `..._align1` kernels, at a third of
// the speed of its aligned twins, though every address and leading dimension was 16-byte aligned.
// The census (emu::gemm_vector_widths) and the trace count each GEMM run by it.
struct VectorWidth {
    size_t bytes = 16;
    static size_t of(uint64_t v) {
        size_t b = 16;
        while (b > 2 && v % b != 0) b /= 2;
        return b;
    }
    void operand(const void* p, int rows, int ld, size_t elem, long long stride = 0) {
        for (uint64_t v : {(uint64_t)reinterpret_cast<uintptr_t>(p), (uint64_t)ld * elem, (uint64_t)rows * elem,
                           (uint64_t)stride * elem})
            bytes = std::min(bytes, of(v));
    }
    // A and B of `ab_elem` bytes, C of four; strides in elements of each operand's own type.
    void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* A, int lda, const void* B,
              int ldb, size_t ab_elem, const void* C, int ldc, long long sA = 0, long long sB = 0, long long sC = 0) {
        const Dims d(ta, tb, m, n, k);
        operand(A, d.a_rows, lda, ab_elem, sA);
        operand(B, d.b_rows, ldb, ab_elem, sB);
        operand(C, m, ldc, 4, sC);
    }
};

emu::GemmVectorWidths g_widths{0, 0, 0, 0};

// One GEMM run (a call; a batched call counts once, at its narrowest entry): into the census, and a
// line into the trace (INITLAB_EMU_TRACE).
void count_gemm(const char* call, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int batch,
                size_t bytes) {
    (bytes >= 16 ? g_widths.bytes16 : bytes == 8 ? g_widths.bytes8 : bytes == 4 ? g_widths.bytes4 : g_widths.bytes2)++;
    if (emu::tracing())
        emu::trace(std::string("gemm ") + call + " " + (ta == CUBLAS_OP_N ? "n" : "t") +
                   (tb == CUBLAS_OP_N ? "n" : "t") + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                   " k=" + std::to_string(k) + " batch=" + std::to_string(batch) +
                   " vector_bytes=" + std::to_string(bytes));
}

// The GEMM itself on fp32 operands whose checks are done, the inputs rounded first as `how` says.
cublasStatus_t sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                     const float* A, int lda, const float* B, int ldb, const float* beta, float* C, int ldc,
                     Rounding how) {
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    Dims d(ta, tb, m, n, k);
    int a_rows = d.a_rows, a_cols = d.a_cols, b_rows = d.b_rows, b_cols = d.b_cols;
    std::vector<float> a_r, b_r;
    if (how != Rounding::none && k > 0) {
        a_r = rounded_copy(A, a_rows, a_cols, lda, how);
        b_r = rounded_copy(B, b_rows, b_cols, ldb, how);
        A = a_r.data();
        B = b_r.data();
    }
    if (k == 0) {  // C = beta·C (BLAS would also do this, but some refuse lda = 0 forms)
        for (int c = 0; c < n; c++)
            for (int r = 0; r < m; r++) {
                float& x = C[(size_t)c * ldc + r];
                x = *beta == 0.f ? 0.f : *beta * x;
            }
        return CUBLAS_STATUS_SUCCESS;
    }
    // beta = 0 must not read C (it may hold the poison pattern, as on a GPU it may hold garbage).
    if (*beta == 0.f)
        for (int c = 0; c < n; c++) std::fill(C + (size_t)c * ldc, C + (size_t)c * ldc + m, 0.f);
    cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

void check_gemm(const char* call, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* A,
                int lda, const void* B, int ldb, const float* C, int ldc, size_t ab_elem) {
    Dims d(ta, tb, m, n, k);
    check_operand(call, "A", A, d.a_rows, k == 0 ? 0 : d.a_cols, lda, ab_elem);
    check_operand(call, "B", B, d.b_rows, k == 0 ? 0 : d.b_cols, ldb, ab_elem);
    check_operand(call, "C", C, m, n, ldc);
}

// The work goes on the handle's stream: done now, or recorded while the stream is captured, with
// alpha, beta and the math mode read now (host pointer mode: cuBLAS reads them at the call). The
// operands are checked now and again when a graph runs the GEMM.
cublasStatus_t enqueue(cublasHandle_t h, const char* call, std::function<void()> work) {
    cudaError_t e = emu::on_stream(h->stream, call, std::move(work));
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

// bf16 A and B, fp32 C: widen A and B, then the fp32 GEMM (fp32 accumulation). TF32 math would
// not change bf16 inputs (7 mantissa bits fit in TF32's 10), so it is not applied.
cublasStatus_t gemm_bf16(const char* call, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         const float* alpha, const void* A, int lda, const void* B, int ldb, const float* beta,
                         float* C, int ldc) {
    check_gemm(call, ta, tb, m, n, k, A, lda, B, ldb, C, ldc, 2);
    Dims d(ta, tb, m, n, k);
    if (m == 0 || n == 0 || k == 0)
        return sgemm(ta, tb, m, n, k, alpha, nullptr, lda, nullptr, ldb, beta, C, ldc, Rounding::none);
    std::vector<float> a = widened_bf16(A, d.a_rows, d.a_cols, lda), b = widened_bf16(B, d.b_rows, d.b_cols, ldb);
    return sgemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc, Rounding::none);
}

bool bad_args(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb,
              int ldc) {
    if (ta == CUBLAS_OP_C || tb == CUBLAS_OP_C) return true;  // not used by the backend
    if (m < 0 || n < 0 || k < 0) return true;
    if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k)) return true;
    if (ldb < std::max(1, tb == CUBLAS_OP_N ? k : n)) return true;
    if (ldc < std::max(1, m)) return true;
    return false;
}

}  // namespace

emu::GemmVectorWidths emu::gemm_vector_widths() { return g_widths; }

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bad_args(h, ta, tb, m, n, k, lda, ldb, ldc)) return CUBLAS_STATUS_INVALID_VALUE;
    check_gemm("cublasSgemm", ta, tb, m, n, k, A, lda, B, ldb, C, ldc, 4);
    float a = *alpha, b = *beta;
    const Rounding how = h->math == CUBLAS_TF32_TENSOR_OP_MATH ? Rounding::tf32 : Rounding::none;
    VectorWidth w;
    w.gemm(ta, tb, m, n, k, A, lda, B, ldb, 4, C, ldc);
    return enqueue(h, "cublasSgemm", [=] {
        check_gemm("cublasSgemm", ta, tb, m, n, k, A, lda, B, ldb, C, ldc, 4);
        count_gemm("cublasSgemm", ta, tb, m, n, k, 1, w.bytes);
        sgemm(ta, tb, m, n, k, &a, A, lda, B, ldb, &b, C, ldc, how);
    });
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long sA,
                                         const float* B, int ldb, long long sB, const float* beta, float* C, int ldc,
                                         long long sC, int batch) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bad_args(h, ta, tb, m, n, k, lda, ldb, ldc) || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    auto checks = [=] {
        for (int i = 0; i < batch; i++)
            check_gemm("cublasSgemmStridedBatched", ta, tb, m, n, k, A + i * sA, lda, B + i * sB, ldb, C + i * sC, ldc, 4);
    };
    checks();
    float a = *alpha, b = *beta;
    const Rounding how = h->math == CUBLAS_TF32_TENSOR_OP_MATH ? Rounding::tf32 : Rounding::none;
    VectorWidth w;
    w.gemm(ta, tb, m, n, k, A, lda, B, ldb, 4, C, ldc, batch > 1 ? sA : 0, batch > 1 ? sB : 0, batch > 1 ? sC : 0);
    return enqueue(h, "cublasSgemmStridedBatched", [=] {
        checks();
        count_gemm("cublasSgemmStridedBatched", ta, tb, m, n, k, batch, w.bytes);
        for (int i = 0; i < batch; i++)
            sgemm(ta, tb, m, n, k, &a, A + i * sA, lda, B + i * sB, ldb, &b, C + i * sC, ldc, how);
    });
}

// The address arrays of a batched call lie in device memory (checked at the call; the addresses
// themselves are read, and each product checked, when the GEMM runs).
static void check_address_arrays(const char* call, const void* A, const void* B, const void* C, int batch) {
    const char* names[3] = {"Aarray", "Barray", "Carray"};
    const void* arrays[3] = {A, B, C};
    for (int i = 0; i < 3; i++) check_operand(call, names[i], arrays[i], batch, 1, batch, sizeof(void*));
}

cublasStatus_t cublasSgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float* alpha, const float* const A[], int lda, const float* const B[], int ldb,
                                  const float* beta, float* const C[], int ldc, int batch) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bad_args(h, ta, tb, m, n, k, lda, ldb, ldc) || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    check_address_arrays("cublasSgemmBatched", A, B, C, batch);
    float a = *alpha, b = *beta;
    const Rounding how = h->math == CUBLAS_TF32_TENSOR_OP_MATH ? Rounding::tf32 : Rounding::none;
    return enqueue(h, "cublasSgemmBatched", [=] {
        VectorWidth w;
        for (int i = 0; i < batch; i++) {
            check_gemm("cublasSgemmBatched", ta, tb, m, n, k, A[i], lda, B[i], ldb, C[i], ldc, 4);
            w.gemm(ta, tb, m, n, k, A[i], lda, B[i], ldb, 4, C[i], ldc);
        }
        count_gemm("cublasSgemmBatched", ta, tb, m, n, k, batch, w.bytes);
        for (int i = 0; i < batch; i++) sgemm(ta, tb, m, n, k, &a, A[i], lda, B[i], ldb, &b, C[i], ldc, how);
    });
}

// The types cublasGemmEx is asked for: the two forms the backend uses, else unsupported.
static bool bf16_in_fp32_out(cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute) {
    return at == CUDA_R_16BF && bt == CUDA_R_16BF && ct == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F;
}
static bool fp32_fast_bf16(cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute) {
    return at == CUDA_R_32F && bt == CUDA_R_32F && ct == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F_FAST_16BF;
}

namespace {

// One product of GemmEx's typed operands, checked: bf16 A and B (gemm_bf16), or with `fast` fp32
// ones rounded to bf16 first. Both compute types are 32F ones: alpha and beta are floats.
cublasStatus_t gemm_typed(const char* call, bool fast, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          const float* alpha, const void* A, int lda, const void* B, int ldb, const float* beta,
                          float* C, int ldc) {
    if (!fast) return gemm_bf16(call, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    check_gemm(call, ta, tb, m, n, k, A, lda, B, ldb, C, ldc, 4);
    return sgemm(ta, tb, m, n, k, alpha, static_cast<const float*>(A), lda, static_cast<const float*>(B), ldb, beta, C,
                 ldc, Rounding::bf16);
}

}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt,
                            int ldb, const void* beta, void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool fast = fp32_fast_bf16(at, bt, ct, compute);
    if (!fast && !bf16_in_fp32_out(at, bt, ct, compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (bad_args(h, ta, tb, m, n, k, lda, ldb, ldc)) return CUBLAS_STATUS_INVALID_VALUE;
    float* c = static_cast<float*>(C);
    check_gemm("cublasGemmEx", ta, tb, m, n, k, A, lda, B, ldb, c, ldc, fast ? 4 : 2);
    float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
    VectorWidth w;
    w.gemm(ta, tb, m, n, k, A, lda, B, ldb, fast ? 4 : 2, c, ldc);
    return enqueue(h, "cublasGemmEx", [=] {
        count_gemm("cublasGemmEx", ta, tb, m, n, k, 1, w.bytes);
        gemm_typed("cublasGemmEx", fast, ta, tb, m, n, k, &al, A, lda, B, ldb, &be, c, ldc);
    });
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType at, int lda,
                                          long long sA, const void* B, cudaDataType bt, int ldb, long long sB,
                                          const void* beta, void* C, cudaDataType ct, int ldc, long long sC,
                                          int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool fast = fp32_fast_bf16(at, bt, ct, compute);
    if (!fast && !bf16_in_fp32_out(at, bt, ct, compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (bad_args(h, ta, tb, m, n, k, lda, ldb, ldc) || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    // Strides count elements of each operand's own type: A and B two bytes (bf16) or four, C four.
    const long long elem = fast ? 4 : 2;
    const char* a = static_cast<const char*>(A);
    const char* b = static_cast<const char*>(B);
    float* c = static_cast<float*>(C);
    for (int i = 0; i < batch; i++)
        check_gemm("cublasGemmStridedBatchedEx", ta, tb, m, n, k, a + i * sA * elem, lda, b + i * sB * elem, ldb,
                   c + i * sC, ldc, (size_t)elem);
    float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
    VectorWidth w;
    w.gemm(ta, tb, m, n, k, A, lda, B, ldb, (size_t)elem, c, ldc, batch > 1 ? sA : 0, batch > 1 ? sB : 0,
           batch > 1 ? sC : 0);
    return enqueue(h, "cublasGemmStridedBatchedEx", [=] {
        count_gemm("cublasGemmStridedBatchedEx", ta, tb, m, n, k, batch, w.bytes);
        for (int i = 0; i < batch; i++)
            gemm_typed("cublasGemmStridedBatchedEx", fast, ta, tb, m, n, k, &al, a + i * sA * elem, lda,
                       b + i * sB * elem, ldb, &be, c + i * sC, ldc);
    });
}

cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* const A[], cudaDataType at, int lda,
                                   const void* const B[], cudaDataType bt, int ldb, const void* beta, void* const C[],
                                   cudaDataType ct, int ldc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool fast = fp32_fast_bf16(at, bt, ct, compute);
    if (!fast && !bf16_in_fp32_out(at, bt, ct, compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (bad_args(h, ta, tb, m, n, k, lda, ldb, ldc) || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    check_address_arrays("cublasGemmBatchedEx", A, B, C, batch);
    float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
    return enqueue(h, "cublasGemmBatchedEx", [=] {
        VectorWidth w;
        for (int i = 0; i < batch; i++) w.gemm(ta, tb, m, n, k, A[i], lda, B[i], ldb, fast ? 4 : 2, C[i], ldc);
        count_gemm("cublasGemmBatchedEx", ta, tb, m, n, k, batch, w.bytes);
        for (int i = 0; i < batch; i++) {
            float* c = static_cast<float*>(C[i]);
            check_gemm("cublasGemmBatchedEx", ta, tb, m, n, k, A[i], lda, B[i], ldb, c, ldc, fast ? 4 : 2);
            gemm_typed("cublasGemmBatchedEx", fast, ta, tb, m, n, k, &al, A[i], lda, B[i], ldb, &be, c, ldc);
        }
    });
}

// ---------------------------------------------------------------------------------------------
// cuBLASLt (include/cublasLt.h)

struct cublasLtContext {};
struct cublasLtMatmulDescOpaque {
    cublasComputeType_t compute;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const float* bias = nullptr;
};
struct cublasLtMatrixLayoutOpaque {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch = 1;   // CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT
    int64_t stride = 0;  // CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, in elements
};
struct cublasLtMatmulPreferenceOpaque {
    size_t workspace_bytes = 0;
    uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D (cuBLASLt's default)
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    *handle = new cublasLtContext;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
    if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32 && compute != CUBLAS_COMPUTE_32F_FAST_16BF)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    *desc = new cublasLtMatmulDescOpaque{compute};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

// Attributes are copied from buf, whose size must be the attribute's, as cuBLASLt checks.
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
    if (!desc || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA:
        case CUBLASLT_MATMUL_DESC_TRANSB: {
            if (bytes != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
            int32_t op;
            std::memcpy(&op, buf, sizeof op);
            if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return CUBLAS_STATUS_INVALID_VALUE;
            (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->ta : desc->tb) = (cublasOperation_t)op;
            return CUBLAS_STATUS_SUCCESS;
        }
        case CUBLASLT_MATMUL_DESC_EPILOGUE: {
            if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
            uint32_t e;
            std::memcpy(&e, buf, sizeof e);
            if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_BGRADB)
                return CUBLAS_STATUS_NOT_SUPPORTED;
            desc->epilogue = (cublasLtEpilogue_t)e;
            return CUBLAS_STATUS_SUCCESS;
        }
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
            if (bytes != sizeof(const void*)) return CUBLAS_STATUS_INVALID_VALUE;
            std::memcpy(&desc->bias, buf, sizeof desc->bias);
            return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    if (type != CUDA_R_32F && type != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (ld < (int64_t)std::max<uint64_t>(1, rows) || rows > INT32_MAX || cols > INT32_MAX || ld > INT32_MAX)
        return CUBLAS_STATUS_INVALID_VALUE;
    *layout = new cublasLtMatrixLayoutOpaque{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
    if (!layout || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) {
        int32_t v;
        if (bytes != sizeof v) return CUBLAS_STATUS_INVALID_VALUE;
        std::memcpy(&v, buf, sizeof v);
        if (v < 1) return CUBLAS_STATUS_INVALID_VALUE;
        layout->batch = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) {
        if (bytes != sizeof layout->stride) return CUBLAS_STATUS_INVALID_VALUE;
        std::memcpy(&layout->stride, buf, sizeof layout->stride);
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    *pref = new cublasLtMatmulPreferenceOpaque;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
    if (!pref || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (bytes != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        uint64_t v;
        std::memcpy(&v, buf, sizeof v);
        pref->workspace_bytes = (size_t)v;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
        uint32_t v;
        if (bytes != sizeof v) return CUBLAS_STATUS_INVALID_VALUE;
        std::memcpy(&v, buf, sizeof v);
        if (v == 0 || (v & (v - 1))) return CUBLAS_STATUS_INVALID_VALUE;  // a power of two
        pref->min_alignment[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

namespace {

// m, n, k of a matmul from its layouts and transposes, or false where they do not fit together
// (D is m × n; op(A) m × k; op(B) k × n; C as D), or the types are not a supported combination.
bool lt_shapes(const cublasLtMatmulDescOpaque* desc, const cublasLtMatrixLayoutOpaque* a,
               const cublasLtMatrixLayoutOpaque* b, const cublasLtMatrixLayoutOpaque* c,
               const cublasLtMatrixLayoutOpaque* d, int& m, int& n, int& k) {
    m = (int)d->rows;
    n = (int)d->cols;
    const uint64_t a_m = desc->ta == CUBLAS_OP_N ? a->rows : a->cols, a_k = desc->ta == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t b_k = desc->tb == CUBLAS_OP_N ? b->rows : b->cols, b_n = desc->tb == CUBLAS_OP_N ? b->cols : b->rows;
    k = (int)a_k;
    return a_m == d->rows && b_n == d->cols && b_k == a_k && c->rows == d->rows && c->cols == d->cols &&
           a->batch == d->batch && b->batch == d->batch && c->batch == d->batch;
}

bool lt_types(const cublasLtMatmulDescOpaque* desc, const cublasLtMatrixLayoutOpaque* a,
              const cublasLtMatrixLayoutOpaque* b, const cublasLtMatrixLayoutOpaque* c,
              const cublasLtMatrixLayoutOpaque* d) {
    if (c->type != CUDA_R_32F || d->type != CUDA_R_32F || a->type != b->type) return false;
    return a->type == CUDA_R_32F || desc->compute == CUBLAS_COMPUTE_32F;  // bf16 inputs: plain 32F compute
}

}  // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !a || !b || !c || !d || !pref || requested < 1 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    int m, n, k;
    if (!lt_shapes(desc, a, b, c, d, m, n, k)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!lt_types(desc, a, b, c, d)) return CUBLAS_STATUS_NOT_SUPPORTED;
    // algo.data: [0] which candidate, [1..4] the alignments of A, B, C, D it was chosen for.
    const int count = std::min(requested, kEmuLtAlgos);
    for (int i = 0; i < count; i++) {
        results[i] = cublasLtMatmulHeuristicResult_t{};
        results[i].algo.data[0] = (uint64_t)i;
        for (int o = 0; o < 4; o++) results[i].algo.data[1 + o] = pref->min_alignment[o];
        results[i].state = CUBLAS_STATUS_SUCCESS;
        results[i].wavesCount = 1.f;
    }
    *returned = count;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !a || !b || !c || !d || !alpha || !beta || !algo) return CUBLAS_STATUS_INVALID_VALUE;
    int m, n, k;
    if (!lt_shapes(desc, a, b, c, d, m, n, k)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!lt_types(desc, a, b, c, d)) return CUBLAS_STATUS_NOT_SUPPORTED;
    const bool bias = desc->epilogue == CUBLASLT_EPILOGUE_BIAS, bias_grad = desc->epilogue == CUBLASLT_EPILOGUE_BGRADB;
    if ((bias || bias_grad) && !desc->bias) return CUBLAS_STATUS_INVALID_VALUE;
    if (bias_grad && d->batch != 1) return CUBLAS_STATUS_NOT_SUPPORTED;
    const size_t elem = a->type == CUDA_R_16BF ? 2 : 4;
    const int batch = d->batch;
    // Every matrix of the batch must be as aligned as the algorithm was chosen for.
    const cublasLtMatrixLayoutOpaque* layouts[4] = {a, b, c, d};
    const void* operands[4] = {A, B, C, D};
    for (int o = 0; o < 4; o++) {
        const uint64_t need = algo->data[1 + o];
        const size_t bytes = o < 2 ? elem : 4;
        for (int i = 0; i < batch; i++) {
            const uintptr_t at = reinterpret_cast<uintptr_t>(operands[o]) + (uintptr_t)(i * layouts[o]->stride * bytes);
            if (need == 0 || at % need != 0)
                throw emu::Error(std::string("CUDA emulator: cublasLtMatmul: operand ") + "ABCD"[o] + " (batch entry " +
                                 std::to_string(i) + ") at " + std::to_string(at) + " is not aligned to the " +
                                 std::to_string(need) + " bytes its algorithm was chosen for (set " +
                                 "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_" + "ABCD"[o] + "_BYTES in the heuristic's preference)");
        }
    }
    const cublasOperation_t ta = desc->ta, tb = desc->tb;
    const int lda = (int)a->ld, ldb = (int)b->ld, ldc = (int)c->ld, ldd = (int)d->ld;
    const int64_t sa = a->stride * (int64_t)elem, sb = b->stride * (int64_t)elem, sc = c->stride, sd = d->stride;
    const char* ap = static_cast<const char*>(A);
    const char* bp = static_cast<const char*>(B);
    const float* cp = static_cast<const float*>(C);
    float* dp = static_cast<float*>(D);
    const float* bias_p = bias ? desc->bias : nullptr;
    float* bias_grad_p = bias_grad ? const_cast<float*>(desc->bias) : nullptr;  // written: the gradient
    auto checks = [=] {
        for (int i = 0; i < batch; i++) {
            check_gemm("cublasLtMatmul", ta, tb, m, n, k, ap + i * sa, lda, bp + i * sb, ldb, dp + i * sd, ldd, elem);
            check_operand("cublasLtMatmul", "C", cp + i * sc, m, n, ldc);
        }
        if (bias_p) check_operand("cublasLtMatmul", "bias", bias_p, m, 1, m);
        if (bias_grad_p) check_operand("cublasLtMatmul", "bias gradient", bias_grad_p, n, 1, n);
    };
    checks();
    const Rounding how = a->type == CUDA_R_16BF                              ? Rounding::none
                         : desc->compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? Rounding::tf32
                         : desc->compute == CUBLAS_COMPUTE_32F_FAST_16BF ? Rounding::bf16
                                                                          : Rounding::none;
    const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
    const bool widen = a->type == CUDA_R_16BF;
    const Dims dims(ta, tb, m, n, k);
    VectorWidth w;  // D as C (cuBLASLt's epilogue writes D with the vectors it reads C with)
    const bool strided = batch > 1;
    w.gemm(ta, tb, m, n, k, A, lda, B, ldb, elem, C, ldc, strided ? a->stride : 0, strided ? b->stride : 0,
           strided ? sc : 0);
    w.operand(D, m, ldd, 4, strided ? sd : 0);
    cudaError_t e = emu::on_stream(stream, "cublasLtMatmul", [=] {
        checks();
        count_gemm("cublasLtMatmul", ta, tb, m, n, k, batch, w.bytes);
        for (int i = 0; i < batch; i++) {
            const void* Ai = ap + i * sa;
            const void* Bi = bp + i * sb;
            const float* Ci = cp + i * sc;
            float* Di = dp + i * sd;
            if (Ci != Di && be != 0.f)  // D = beta·C first, in D
                for (int col = 0; col < n; col++)
                    for (int r = 0; r < m; r++) Di[(size_t)col * ldd + r] = Ci[(size_t)col * ldc + r];
            // B as fp32 (bf16 widened), for the GEMM and the bias gradient
            std::vector<float> wb;
            const float* b32 = static_cast<const float*>(Bi);
            if (widen && k > 0 && n > 0) {
                wb = widened_bf16(Bi, dims.b_rows, dims.b_cols, ldb);
                b32 = wb.data();
            }
            if (widen && k > 0 && m > 0 && n > 0) {
                std::vector<float> wa = widened_bf16(Ai, dims.a_rows, dims.a_cols, lda);
                sgemm(ta, tb, m, n, k, &al, wa.data(), lda, b32, ldb, &be, Di, ldd, Rounding::none);
            } else {
                sgemm(ta, tb, m, n, k, &al, static_cast<const float*>(Ai), lda, b32, ldb, &be, Di, ldd, how);
            }
            if (bias_p)
                for (int col = 0; col < n; col++)
                    for (int r = 0; r < m; r++) Di[(size_t)col * ldd + r] += bias_p[r];
            if (bias_grad_p)  // column j of op(B) summed over k, as stored
                for (int j = 0; j < n; j++) {
                    float s = 0.f;
                    for (int kk = 0; kk < k; kk++)
                        s += b32[tb == CUBLAS_OP_N ? (size_t)j * ldb + kk : (size_t)kk * ldb + j];
                    bias_grad_p[j] = s;
                }
        }
    });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
