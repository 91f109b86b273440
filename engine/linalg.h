// engine/linalg.h: dense factorizations of CPU float32 matrices for the initializers: SVD, QR,
// Moore–Penrose pseudo-inverse and least squares, through LAPACKE.
//
// The initializers (mimetic: SVD of αZ+βI; orthogonal: QR; pseudo-inverses for least-squares
// fits) want accuracy more than speed, so every routine copies its input to double, runs the
// LAPACKE_d* routine, and rounds the result back to float32 once.
//
// These are not autograd ops: inputs are read as plain data and the results never require grad.
// Inputs must be defined, 2-d, float32, on the CPU and finite (NaN/Inf is an error: LAPACK would
// loop or return garbage); each error names the function and the shape.
#pragma once
#include <cstdint>
#include "engine/tensor.h"

namespace engine {

// a [m,n] = U·diag(S)·Vt, S descending and >= 0, k = min(m,n).
//   thin (default): U [m,k], S [k], Vt [k,n];   full_matrices: U [m,m], S [k], Vt [n,n].
// LAPACK's divide and conquer (dgesdd), falling back to dgesvd if it does not converge.
// Singular vectors are unique only up to sign (and rotation within repeated singular values).
struct SVD {
    Tensor U, S, Vt;
};
SVD svd(const Tensor& a, bool full_matrices = false);

// Reduced QR of a [m,n], k = min(m,n): Q [m,k] with orthonormal columns, R [k,n] upper
// triangular, a = Q·R. Signs are fixed so that diag(R) >= 0 (what torch.nn.init.orthogonal_
// does with sign(diag(R))), which makes the factorization unique when a has full rank.
struct QR {
    Tensor Q, R;
};
QR qr(const Tensor& a);

// Moore–Penrose pseudo-inverse [n,m] of a [m,n] through the SVD: a⁺ = V·diag(1/S)·Uᵀ, where
// singular values below rcond·max(S) count as zero. max_rank >= 0 also keeps at most the
// max_rank largest singular values (the truncated pseudo-inverse G⁺_r of impulse3-closed).
Tensor pinv(const Tensor& a, double rcond = 1e-6, int64_t max_rank = -1);

// The minimum-norm x minimizing ||a·x − b|| (Frobenius): a [m,n], b [m,r] -> x [n,r], or
// b [m] -> x [n]. Over- and underdetermined and rank-deficient systems alike (LAPACK's dgelsd;
// singular values below rcond·max(S) count as zero, as in pinv).
Tensor lstsq(const Tensor& a, const Tensor& b, double rcond = 1e-6);

}  // namespace engine
