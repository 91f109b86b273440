// engine/cuda/emu/include/cublas_v2.h: the CUDA emulator's stand-in for cuBLAS.
//
// Only what the backend calls: handles, streams, math modes, single-precision GEMMs (plain,
// strided batched and batched from address arrays), and the mixed-precision GemmEx forms the bf16
// GEMMs use. Semantics are cuBLAS's documented ones: column-major operands, op(A) of
// m×k, op(B) of k×n, C of m×n with leading dimensions lda/ldb/ldc, C = alpha·op(A)·op(B) + beta·C.
// The reference column-major sgemm has exactly these semantics, so each call is checked the way
// cuBLAS checks it (CUBLAS_STATUS_INVALID_VALUE for bad sizes or leading dimensions) and then
// handed to cblas_sgemm(CblasColMajor, ...). Operands must be device memory. In TF32 mode the
// inputs are rounded to TF32 (10-bit mantissa) first, as the tensor cores would.
//
// cublasGemmEx / cublasGemmStridedBatchedEx / cublasGemmBatchedEx: the same operation with typed operands. Only the
// combinations the backend uses are modelled: A and B CUDA_R_16BF, C CUDA_R_32F, computeType
// CUBLAS_COMPUTE_32F (alpha and beta are then floats); and A, B, C CUDA_R_32F with
// CUBLAS_COMPUTE_32F_FAST_16BF, whose inputs are rounded to bf16 (to nearest even, as the
// backend's own conversion; cuBLAS does not document its rounding) before the fp32 GEMM. Any other
// returns CUBLAS_STATUS_NOT_SUPPORTED. A and B are read as bf16 (two bytes per element, widened exactly to
// fp32: a wrong conversion or layout upstream shows), and the products are accumulated in fp32 by
// the reference sgemm (a product of two bf16 values is exact in fp32, so this is what cuBLAS
// computes up to the order of the sums). The algo argument is accepted and ignored.
#pragma once
#include "cuda_runtime.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

// Element types (library_types.h in CUDA; the same values) and compute types: only those used.
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef cudaDataType_t cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16BF = 75, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
} cublasMath_t;

struct cublasContext;
typedef cublasContext* cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes);
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode);
const char* cublasGetStatusString(cublasStatus_t status);
const char* cublasGetStatusName(cublasStatus_t status);

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb, long long strideB,
                                         const float* beta, float* C, int ldc, long long strideC, int batchCount);
// The batch from arrays of the matrices' addresses, in device memory (read when the GEMM runs:
// a kernel queued before it may write them).
cublasStatus_t cublasSgemmBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                  int n, int k, const float* alpha, const float* const Aarray[], int lda,
                                  const float* const Barray[], int ldb, const float* beta, float* const Carray[],
                                  int ldc, int batchCount);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                   int n, int k, const void* alpha, const void* const Aarray[], cudaDataType Atype,
                                   int lda, const void* const Barray[], cudaDataType Btype, int ldb, const void* beta,
                                   void* const Carray[], cudaDataType Ctype, int ldc, int batchCount,
                                   cublasComputeType_t computeType, cublasGemmAlgo_t algo);

namespace emu {
// The GEMMs this process has run (cuBLAS and cuBLASLt calls; a batched call counts once), by the
// widest vector every operand allows: 16, 8, 4 or 2 bytes. Each matrix's address, leading dimension
// and extent along it (rows, column-major) must be multiples of it, and so must the batch strides.
// cuBLAS's kernels need that for their vector loads: on the H100, GEMMs with an extent of 257 there
// ran in its `align1` kernels at a third of the speed (docs/BENCHMARKS.md, session 13). A model
// on paper of how cuBLAS chooses, not cuBLAS's own rule, which it does not document.
struct GemmVectorWidths {
    uint64_t bytes16, bytes8, bytes4, bytes2;
    uint64_t narrower() const { return bytes8 + bytes4 + bytes2; }  // under 16 bytes
    uint64_t total() const { return bytes16 + narrower(); }
};
GemmVectorWidths gemm_vector_widths();
}  // namespace emu
