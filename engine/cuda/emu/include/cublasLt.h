// engine/cuda/emu/include/cublasLt.h: the CUDA emulator's stand-in for cuBLASLt, only what the
// backend calls: a matmul D = alpha·op(A)·op(B) + beta·C (strided batches too) with the bias epilogue (a vector of D's
// row count, added to every column) or the bias-gradient epilogue BGRADB (a vector of D's
// column count, the sums of op(B) over k, written to the bias pointer; one matrix, no batch),
// column-major layouts of fp32 or bf16 elements, the compute
// types of cublas_v2.h (32F; 32F_FAST_TF32 and 32F_FAST_16BF round fp32 inputs first, to TF32 and
// to bf16 to nearest even). Semantics are cuBLASLt's
// documented ones; each call is checked the way cuBLASLt checks it (CUBLAS_STATUS_INVALID_VALUE for
// layouts that do not fit m, n, k and the transposes, CUBLAS_STATUS_NOT_SUPPORTED for other types
// or epilogues), the operands must be device memory, and the work goes on the given stream (so a
// graph capture records it). The heuristic offers up to kEmuLtAlgos "algorithms" (the same product
// each, so that a caller choosing among them is exercised), each made for the operands' minimum
// alignments of the preference (cuBLASLt's default: 256 bytes); cublasLtMatmul refuses operands
// less aligned than its algorithm was chosen for, as a GPU would fault or compute garbage there.
// Implemented in engine/cuda/emu/cublas.cpp beside the GEMMs it reuses.
#pragma once
#include <cstddef>
#include <cstdint>
#include "cublas_v2.h"

constexpr int kEmuLtAlgos = 3;

typedef enum { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
               CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8 } cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_BGRADB = 512
} cublasLtEpilogue_t;
typedef enum { CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6 } cublasLtMatrixLayoutAttribute_t;
typedef enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8 } cublasLtMatmulPreferenceAttributes_t;

struct cublasLtContext;
struct cublasLtMatmulDescOpaque;
struct cublasLtMatrixLayoutOpaque;
struct cublasLtMatmulPreferenceOpaque;
typedef cublasLtContext* cublasLtHandle_t;
typedef cublasLtMatmulDescOpaque* cublasLtMatmulDesc_t;
typedef cublasLtMatrixLayoutOpaque* cublasLtMatrixLayout_t;
typedef cublasLtMatmulPreferenceOpaque* cublasLtMatmulPreference_t;

typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
// Strided batches: BATCH_COUNT an int32_t (equal in A, B, C and D), STRIDED_BATCH_OFFSET an int64_t,
// in elements.
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream);
