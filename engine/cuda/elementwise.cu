// engine/cuda/elementwise.cu: pointwise kernels (engine/cuda/elementwise.h). Every kernel walks
// its OUTPUT with a grid-stride loop (64-bit indices; bias_act's float4 kernels 32-bit where the
// size allows), so consecutive threads write consecutive addresses;
// the math of each unary op is the functor of engine/ops/pointwise.h, shared with the CPU loops.
#include "engine/cuda/elementwise.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include "engine/attention_layout.h"
#include "engine/cuda/kernel.h"
#include "engine/cuda/reduce.h"
#include "engine/ops/pointwise.h"

// Loops over the (at most kMaxDims) dims are UNROLLed (engine/cuda/kernel.h): they index the
// kernel's parameter arrays with constants, which nvcc then keeps in registers.

namespace engine::cuda {

struct AddOp { __device__ float operator()(float x, float y) const { return x + y; } };
struct SubOp { __device__ float operator()(float x, float y) const { return x - y; } };
struct MulOp { __device__ float operator()(float x, float y) const { return x * y; } };
struct DivOp { __device__ float operator()(float x, float y) const { return x / y; } };

// ---------------------------------------------------------------------------------------------
// Binary ops with numpy broadcasting.
//
// The host first simplifies the shapes: output dims of size 1 are dropped, and neighbouring dims
// merge when each input is broadcast along both or along neither (then one stride covers both).
// What is left picks the kernel:
//   - no broadcasting: one flat loop;
//   - one input is a single value (b of shape [1], a bias of one element): the value is read
//     once per thread, no index math;
//   - otherwise: each output index is split into the (at most kMaxDims) merged dims to find the
//     inputs' offsets (stride 0 along a broadcast dim). [rows, n] + [n] is then 2 merged dims.

struct Broadcast {
    int nd;
    int64_t size[kMaxDims];  // merged output dims
    int64_t sa[kMaxDims];    // a's stride along each, 0 where a is broadcast
    int64_t sb[kMaxDims];
};

template <typename Op>
__global__ void binary_same_kernel(const float* a, const float* b, float* out, int64_t n) {
    Op op;
    GRID_STRIDE_LOOP(i, n) out[i] = op(a[i], b[i]);
}

// b_one: b is the single value b[0]; otherwise a is (a[0]).
template <typename Op>
__global__ void binary_one_kernel(const float* a, const float* b, float* out, int64_t n, bool b_one) {
    Op op;
    if (b_one) {
        float s = b[0];
        GRID_STRIDE_LOOP(i, n) out[i] = op(a[i], s);
    } else {
        float s = a[0];
        GRID_STRIDE_LOOP(i, n) out[i] = op(s, b[i]);
    }
}

template <typename Op>
__global__ void binary_broadcast_kernel(const float* a, const float* b, float* out, Broadcast p, int64_t n) {
    Op op;
    GRID_STRIDE_LOOP(i, n) {
        int64_t rem = i, oa = 0, ob = 0;
        UNROLL
        for (int d = kMaxDims - 1; d >= 0; d--) {
            if (d >= p.nd) continue;
            int64_t k = rem % p.size[d];
            rem /= p.size[d];
            oa += k * p.sa[d];
            ob += k * p.sb[d];
        }
        out[i] = op(a[oa], b[ob]);
    }
}

// Float scalar s from the host (binary_scalar).
template <typename Op>
__global__ void binary_scalar_kernel(const float* a, float s, float* out, int64_t n) {
    Op op;
    GRID_STRIDE_LOOP(i, n) out[i] = op(a[i], s);
}

// The float4 twins of the two flat loops above (kernel.h's float4_ok), over n4 = n / 4 float4s.
template <typename Op>
__global__ void binary_same4_kernel(const float4* a, const float4* b, float4* out, int64_t n4) {
    Op op;
    GRID_STRIDE_LOOP(i, n4) {
        const float4 x = a[i], y = b[i];
        out[i] = float4{op(x.x, y.x), op(x.y, y.y), op(x.z, y.z), op(x.w, y.w)};
    }
}
template <typename Op>
__global__ void binary_scalar4_kernel(const float4* a, float s, float4* out, int64_t n4) {
    Op op;
    GRID_STRIDE_LOOP(i, n4) {
        const float4 x = a[i];
        out[i] = float4{op(x.x, s), op(x.y, s), op(x.z, s), op(x.w, s)};
    }
}

template <typename Op>
static void binary_with(const float* a, const Shape& as, const float* b, const Shape& bs, float* out,
                        const Shape& os) {
    int64_t n = os.numel();
    if (n == 0) return;
    // Simplify: drop size-1 output dims, merge neighbours with the same broadcast pattern.
    Broadcast p{};
    bool prev_a = false, prev_b = false;  // broadcast pattern of the last kept dim
    int64_t ra = 1, rb = 1;               // running strides, innermost first
    int64_t size[kMaxDims], sa[kMaxDims], sb[kMaxDims];
    int nd = 0;
    for (int d = os.ndim - 1; d >= 0; d--) {
        if (os[d] == 1) continue;
        bool ba = as[d] == 1, bb = bs[d] == 1;
        if (nd > 0 && ba == prev_a && bb == prev_b) {
            size[nd - 1] *= os[d];  // strides of the merged dim stay those of its inner part
        } else {
            size[nd] = os[d];
            sa[nd] = ba ? 0 : ra;
            sb[nd] = bb ? 0 : rb;
            nd++;
        }
        if (!ba) ra *= as[d];
        if (!bb) rb *= bs[d];
        prev_a = ba;
        prev_b = bb;
    }
    unsigned blocks = blocks_for(n);
    bool a_full = ra == n, b_full = rb == n;  // numel of a / b equals the output's
    if (a_full && b_full) {
        if (float4_ok(n, {a, b, out}))
            KERNEL_LAUNCH(binary_same4_kernel<Op>, blocks_for(n / 4), kBlockSize, 0, (const float4*)a,
                          (const float4*)b, (float4*)out, n / 4);
        else
            KERNEL_LAUNCH(binary_same_kernel<Op>, blocks, kBlockSize, 0, a, b, out, n);
        return;
    }
    if (a_full && rb == 1) { KERNEL_LAUNCH(binary_one_kernel<Op>, blocks, kBlockSize, 0, a, b, out, n, true); return; }
    if (b_full && ra == 1) { KERNEL_LAUNCH(binary_one_kernel<Op>, blocks, kBlockSize, 0, a, b, out, n, false); return; }
    // The merged dims were collected innermost first; the kernel wants them outermost first.
    p.nd = nd;
    for (int i = 0; i < nd; i++) {
        p.size[i] = size[nd - 1 - i];
        p.sa[i] = sa[nd - 1 - i];
        p.sb[i] = sb[nd - 1 - i];
    }
    KERNEL_LAUNCH(binary_broadcast_kernel<Op>, blocks, kBlockSize, 0, a, b, out, p, n);
}

void binary(BinaryOp op, const float* a, const Shape& as, const float* b, const Shape& bs, float* out,
            const Shape& os) {
    switch (op) {
        case BinaryOp::Add: return binary_with<AddOp>(a, as, b, bs, out, os);
        case BinaryOp::Sub: return binary_with<SubOp>(a, as, b, bs, out, os);
        case BinaryOp::Mul: return binary_with<MulOp>(a, as, b, bs, out, os);
        case BinaryOp::Div: return binary_with<DivOp>(a, as, b, bs, out, os);
    }
}

template <typename Op>
static void binary_scalar_with(const float* a, float s, float* out, int64_t n) {
    if (float4_ok(n, {a, out}))
        KERNEL_LAUNCH(binary_scalar4_kernel<Op>, blocks_for(n / 4), kBlockSize, 0, (const float4*)a, s, (float4*)out,
                      n / 4);
    else
        KERNEL_LAUNCH(binary_scalar_kernel<Op>, blocks_for(n), kBlockSize, 0, a, s, out, n);
}

void binary_scalar(BinaryOp op, const float* a, float s, float* out, int64_t n) {
    if (n == 0) return;
    switch (op) {
        case BinaryOp::Add: return binary_scalar_with<AddOp>(a, s, out, n);
        case BinaryOp::Sub: return binary_scalar_with<SubOp>(a, s, out, n);
        case BinaryOp::Mul: return binary_scalar_with<MulOp>(a, s, out, n);
        case BinaryOp::Div: return binary_scalar_with<DivOp>(a, s, out, n);
    }
}

// ---------------------------------------------------------------------------------------------
// Unary ops: y = F::f(x), dx = dy·F::df(x, y).

template <typename F>
__global__ void unary_forward_kernel(const float* x, float* y, int64_t n) {
    GRID_STRIDE_LOOP(i, n) y[i] = F::f(x[i]);
}

template <typename F>
__global__ void unary_backward_kernel(const float* x, const float* y, const float* dy, float* dx, int64_t n) {
    GRID_STRIDE_LOOP(i, n) dx[i] = dy[i] * F::df(F::kReadsX ? x[i] : 0.f, F::kReadsY ? y[i] : 0.f);
}

// Their float4 twins (kernel.h's float4_ok); x or y is only read (and may be null) as F says.
template <typename F>
__global__ void unary_forward4_kernel(const float4* x, float4* y, int64_t n4) {
    GRID_STRIDE_LOOP(i, n4) {
        const float4 v = x[i];
        y[i] = float4{F::f(v.x), F::f(v.y), F::f(v.z), F::f(v.w)};
    }
}

template <typename F>
__global__ void unary_backward4_kernel(const float4* x, const float4* y, const float4* dy, float4* dx, int64_t n4) {
    const float4 zero{0.f, 0.f, 0.f, 0.f};
    GRID_STRIDE_LOOP(i, n4) {
        const float4 u = F::kReadsX ? x[i] : zero, w = F::kReadsY ? y[i] : zero, g = dy[i];
        dx[i] = float4{g.x * F::df(u.x, w.x), g.y * F::df(u.y, w.y), g.z * F::df(u.z, w.z), g.w * F::df(u.w, w.w)};
    }
}

template <typename F>
void unary_forward(const float* x, float* y, int64_t n) {
    if (n == 0) return;
    if (float4_ok(n, {x, y}))
        KERNEL_LAUNCH(unary_forward4_kernel<F>, blocks_for(n / 4), kBlockSize, 0, (const float4*)x, (float4*)y, n / 4);
    else
        KERNEL_LAUNCH(unary_forward_kernel<F>, blocks_for(n), kBlockSize, 0, x, y, n);
}

template <typename F>
void unary_backward(const float* x, const float* y, const float* dy, float* dx, int64_t n) {
    if (n == 0) return;
    if (float4_ok(n, {x, y, dy, dx}))
        KERNEL_LAUNCH(unary_backward4_kernel<F>, blocks_for(n / 4), kBlockSize, 0, (const float4*)x,
                      (const float4*)y, (const float4*)dy, (float4*)dx, n / 4);
    else
        KERNEL_LAUNCH(unary_backward_kernel<F>, blocks_for(n), kBlockSize, 0, x, y, dy, dx, n);
}

#define INSTANTIATE(F)                                                      \
    template void unary_forward<pointwise::F>(const float*, float*, int64_t); \
    template void unary_backward<pointwise::F>(const float*, const float*, const float*, float*, int64_t);
INSTANTIATE(Neg) INSTANTIATE(Exp) INSTANTIATE(Log) INSTANTIATE(Sqrt) INSTANTIATE(Rsqrt) INSTANTIATE(Abs)
INSTANTIATE(Tanh) INSTANTIATE(Sigmoid) INSTANTIATE(Relu) INSTANTIATE(Relu2) INSTANTIATE(Gelu)
INSTANTIATE(GeluTanh) INSTANTIATE(Silu)
#undef INSTANTIATE

// ---------------------------------------------------------------------------------------------
// bias + activation over [rows, n]. Block (32, 8): the 32 threads of a warp take 32 consecutive columns
// of a row (coalesced), the 8 warps and then the grid's y dim stride the rows; each thread keeps
// its column's bias in a register, so there is no index division (a flat loop would need i % n).

constexpr int kBiasTile = 32, kBiasRows = 8;
// At most 4096 blocks along y (grid y's limit is 65535): with one 32-column tile that is already 1M
// threads, several times what a GPU holds at once; longer inputs loop over their rows.
constexpr int64_t kBiasMaxSlices = 4096;

static dim3 bias_grid(int64_t rows, int64_t n) {
    int64_t tiles = (n + kBiasTile - 1) / kBiasTile, slices = (rows + kBiasRows - 1) / kBiasRows;
    return dim3((unsigned)tiles, (unsigned)(slices < kBiasMaxSlices ? slices : kBiasMaxSlices));
}

// gate (null: none) multiplies each output, act(x + bias)·gate: GAU's U ⊙ A·V.
template <typename F>
__global__ void bias_act_forward_kernel(const float* x, const float* bias, const float* gate, float* y, int64_t rows,
                                        int64_t n) {
    int64_t j = (int64_t)blockIdx.x * kBiasTile + threadIdx.x;
    if (j >= n) return;
    float b = bias[j];
    for (int64_t r = (int64_t)blockIdx.y * kBiasRows + threadIdx.y; r < rows; r += (int64_t)gridDim.y * kBiasRows) {
        const float a = F::f(x[r * n + j] + b);
        y[r * n + j] = gate ? a * gate[r * n + j] : a;
    }
}

// The column sums of the thread block's dx for bias_act_backward's dbias: each thread's sum over
// its rows (acc, of type V: float or float4) meets the other 7 warps' in shared memory, added in
// warp order, into partial[blockIdx.y][j] (one row of partial sums per slice of rows). Every
// thread of the block reaches the barrier.
__device__ __forceinline__ float plus(float a, float b) { return a + b; }
__device__ __forceinline__ float4 plus(float4 a, float4 b) { return float4{a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w}; }
__device__ __forceinline__ float4 times(float4 a, float4 b) {
    return float4{a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w};
}
template <typename F>
__device__ __forceinline__ float4 act4(float4 v) { return float4{F::f(v.x), F::f(v.y), F::f(v.z), F::f(v.w)}; }

template <typename V>
__device__ __forceinline__ void bias_partial(V acc, V* partial, int64_t j, int64_t n) {
    SHARED_ARRAY(V, sums, kBiasRows * kBiasTile);
    sums[threadIdx.y * kBiasTile + threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y != 0 || j >= n) return;
    for (int k = 1; k < kBiasRows; k++) acc = plus(acc, sums[k * kBiasTile + threadIdx.x]);
    partial[(int64_t)blockIdx.y * n + j] = acc;
}

// y (null: not wanted) gets act(x + bias) again, the forward's bits; it may be dy (each thread
// reads its element of dy before it writes that element of y). partial (null: no dbias wanted)
// gets the column sums of dx of each slice of rows (bias_partial). With a gate (and no y):
// dx = (dy·gate)·act'(x + bias) and dgate (null: not wanted) = dy·act(x + bias), mul's products.
template <typename F>
__global__ void bias_act_backward_kernel(const float* x, const float* bias, const float* dy, float* dx, float* y,
                                          float* partial, const float* gate, float* dgate, int64_t rows, int64_t n) {
    const int64_t j = (int64_t)blockIdx.x * kBiasTile + threadIdx.x;
    float acc = 0.f;
    if (j < n) {
        const float b = bias[j];
        for (int64_t r = (int64_t)blockIdx.y * kBiasRows + threadIdx.y; r < rows; r += (int64_t)gridDim.y * kBiasRows) {
            const float v = x[r * n + j] + b, g = dy[r * n + j];
            const float d = (gate ? g * gate[r * n + j] : g) * F::df(v, 0.f);  // df reads x only
            dx[r * n + j] = d;
            acc += d;
            if (y) y[r * n + j] = F::f(v);
            if (dgate) dgate[r * n + j] = g * F::f(v);
        }
    }
    if (partial) bias_partial(acc, partial, j, n);
}

// The forward over float4s, when the width is a multiple of 4 and the pointers 16-byte aligned
// (the usual case): a flat grid-stride loop with 16-byte loads and stores and a 32-bit modulo for
// the column. The scalar kernels moved 1.5 TB/s on an H200 (ViT-Tiny's [32896, 768]), the flat
// float4 ones 3.1 (the backward's 3.06 on an H100: x, dy, dx and y, 404 MB in 132 µs); the values
// are the same bits, element by element.
template <typename F>
__global__ void bias_act_forward4_kernel(const float4* x, const float4* bias, const float4* gate, float4* y, int n4,
                                         int total4) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total4; i += blockDim.x * gridDim.x) {
        const float4 a = act4<F>(plus(x[i], bias[i % n4]));
        y[i] = gate ? times(a, gate[i]) : a;
    }
}

// The backward over float4 columns (n4 of them a row), in the scalar backward's block layout: a
// warp takes 32 consecutive float4s of a row (512 bytes, coalesced), a thread one float4 column,
// whose dx it adds up for dbias. (Until session 12 it was a flat loop like the forward's, and
// dbias a second pass over dx: 41 µs of the 132 again, on the H100.)
template <typename F>
__global__ void bias_act_backward4_kernel(const float4* x, const float4* bias, const float4* dy, float4* dx,
                                           float4* y, float4* partial, const float4* gate, float4* dgate,
                                           int64_t rows, int64_t n4) {
    const int64_t j = (int64_t)blockIdx.x * kBiasTile + threadIdx.x;
    float4 acc{0.f, 0.f, 0.f, 0.f};
    if (j < n4) {
        const float4 b = bias[j];
        for (int64_t r = (int64_t)blockIdx.y * kBiasRows + threadIdx.y; r < rows; r += (int64_t)gridDim.y * kBiasRows) {
            const float4 v = plus(x[r * n4 + j], b), dyv = dy[r * n4 + j];
            const float4 g = gate ? times(dyv, gate[r * n4 + j]) : dyv;
            const float4 d{g.x * F::df(v.x, 0.f), g.y * F::df(v.y, 0.f), g.z * F::df(v.z, 0.f), g.w * F::df(v.w, 0.f)};
            dx[r * n4 + j] = d;
            acc = plus(acc, d);
            if (y) y[r * n4 + j] = act4<F>(v);
            if (dgate) dgate[r * n4 + j] = times(dyv, act4<F>(v));
        }
    }
    if (partial) bias_partial(acc, partial, j, n4);
}

// Whether the float4 forward applies: n divisible by 4, every pointer 16-byte aligned, and rows·n/4
// plus a grid's stride within int.
static bool bias_vec4(int64_t rows, int64_t n, std::initializer_list<const void*> ptrs) {
    return float4_ok(n, ptrs) && rows * n < (int64_t(1) << 32);
}

template <typename F>
static void bias_act_forward_as(const float* x, const float* bias, const float* gate, float* y, int64_t rows,
                                int64_t n) {
    if (bias_vec4(rows, n, {x, bias, gate, y})) {
        int total4 = (int)(rows * n / 4);
        KERNEL_LAUNCH(bias_act_forward4_kernel<F>, blocks_for(total4), kBlockSize, 0, (const float4*)x,
                      (const float4*)bias, (const float4*)gate, (float4*)y, (int)(n / 4), total4);
    } else {
        KERNEL_LAUNCH(bias_act_forward_kernel<F>, bias_grid(rows, n), dim3(kBiasTile, kBiasRows), 0, x, bias, gate, y,
                      rows, n);
    }
}

template <typename F>
static void bias_act_backward_as(const float* x, const float* bias, const float* dy, float* dx, float* y,
                                 float* partial, const float* gate, float* dgate, bool vec, dim3 grid, int64_t rows,
                                 int64_t n) {
    static_assert(!F::kReadsY, "bias_act: the activation's derivative must read its input only");
    if (vec)
        KERNEL_LAUNCH(bias_act_backward4_kernel<F>, grid, dim3(kBiasTile, kBiasRows), 0, (const float4*)x,
                      (const float4*)bias, (const float4*)dy, (float4*)dx, (float4*)y, (float4*)partial,
                      (const float4*)gate, (float4*)dgate, rows, n / 4);
    else
        KERNEL_LAUNCH(bias_act_backward_kernel<F>, grid, dim3(kBiasTile, kBiasRows), 0, x, bias, dy, dx, y, partial,
                      gate, dgate, rows, n);
}

// bias_rows: the bias tiled over the rows, plus a residual where there is one (a Pre-LN block's
// stream, which the branch's last GEMM then adds into: no separate residual add, which read two
// [rows, n] tensors and wrote a third), float4 where it can (a flat loop, the column by a 32-bit
// modulo), else in the 2-d layout above. It replaced a rank-1 cuBLAS GEMM (a column of ones times
// the bias, K = 1) that wrote ViT-Tiny's rows at about 1.8 TB/s on an H100 (session 12).
__global__ void bias_rows4_kernel(const float4* bias, const float4* residual, float4* y, int n4, int total4) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total4; i += blockDim.x * gridDim.x) {
        const float4 b = bias ? bias[i % n4] : float4{0.f, 0.f, 0.f, 0.f};
        y[i] = residual ? plus(b, residual[i]) : b;
    }
}

__global__ void bias_rows_kernel(const float* bias, const float* residual, float* y, int64_t rows, int64_t n) {
    const int64_t j = (int64_t)blockIdx.x * kBiasTile + threadIdx.x;
    if (j >= n) return;
    const float b = bias ? bias[j] : 0.f;
    for (int64_t r = (int64_t)blockIdx.y * kBiasRows + threadIdx.y; r < rows; r += (int64_t)gridDim.y * kBiasRows)
        y[r * n + j] = residual ? b + residual[r * n + j] : b;
}

void bias_rows(const float* bias, float* y, int64_t rows, int64_t n, const float* residual) {
    if (rows == 0 || n == 0) return;
    if (bias_vec4(rows, n, {bias, residual, y})) {
        const int total4 = (int)(rows * n / 4);
        KERNEL_LAUNCH(bias_rows4_kernel, blocks_for(total4), kBlockSize, 0, (const float4*)bias,
                      (const float4*)residual, (float4*)y, (int)(n / 4), total4);
    } else {
        KERNEL_LAUNCH(bias_rows_kernel, bias_grid(rows, n), dim3(kBiasTile, kBiasRows), 0, bias, residual, y, rows, n);
    }
}

void bias_act_forward(const float* x, const float* bias, float* y, int64_t rows, int64_t n, BiasAct act) {
    bias_act_gate_forward(x, bias, nullptr, y, rows, n, act);
}

void bias_act_gate_forward(const float* x, const float* bias, const float* gate, float* y, int64_t rows, int64_t n,
                           BiasAct act) {
    if (rows == 0 || n == 0) return;
    pointwise::with_bias_act(act, [&](auto f) { bias_act_forward_as<decltype(f)>(x, bias, gate, y, rows, n); });
}

// dbias: each slice of rows sums its dx as it writes it (bias_partial: no second read of dx), and
// reduce.cu's sum_dim adds up the slices' rows of partial sums: fixed orders, the same bits every
// run. At most kBiasSumSlices slices (a thread then takes rows/2048 rows or more): enough blocks
// to fill a GPU (ViT-Tiny's [32896, 768]: 6 × 256 blocks of 256 threads), few partial sums (768 KB).
constexpr int64_t kBiasSumSlices = 256;
static void bias_act_backward_any(const float* x, const float* bias, const float* dy, float* dx, float* dbias, float* y,
                                  const float* gate, float* dgate, int64_t rows, int64_t n, BiasAct act) {
    if (n == 0) return;
    if (rows == 0) {  // an empty sum
        if (dbias) memset_zero(dbias, sizeof(float) * n);
        return;
    }
    const int64_t slices = std::min((rows + kBiasRows - 1) / kBiasRows, dbias ? kBiasSumSlices : kBiasMaxSlices);
    Scratch<> partial(dbias ? slices * n : 0);
    // (a null pointer is 16-byte aligned)
    const bool vec = float4_ok(n, {x, bias, dy, dx, y, partial.p, gate, dgate});
    const int64_t cols = vec ? n / 4 : n;
    const dim3 grid((unsigned)((cols + kBiasTile - 1) / kBiasTile), (unsigned)slices);
    pointwise::with_bias_act(act, [&](auto f) {
        bias_act_backward_as<decltype(f)>(x, bias, dy, dx, y, partial.p, gate, dgate, vec, grid, rows, n);
    });
    if (dbias) sum_dim(partial.p, dbias, 1, slices, n);
}

void bias_act_backward(const float* x, const float* bias, const float* dy, float* dx, float* dbias, float* y,
                       int64_t rows, int64_t n, BiasAct act) {
    bias_act_backward_any(x, bias, dy, dx, dbias, y, nullptr, nullptr, rows, n, act);
}

void bias_act_gate_backward(const float* x, const float* bias, const float* gate, const float* dy, float* dx,
                            float* dbias, float* dgate, int64_t rows, int64_t n, BiasAct act) {
    bias_act_backward_any(x, bias, dy, dx, dbias, nullptr, gate, dgate, rows, n, act);
}

// ---------------------------------------------------------------------------------------------
// masked_relu2: one thread per element of [outer, T, S] (the row index from the flat one), the
// products in the order of mul(relu2(x), scale) and its backward, as the CPU's.

__device__ __forceinline__ bool key_visible(int64_t idx, int64_t T, int64_t S, bool causal) {
    return idx % S < visible_keys((idx / S) % T, T, S, causal);
}

__global__ void masked_relu2_forward_kernel(const float* x, float* y, int64_t n, int64_t T, int64_t S, float scale,
                                            bool causal) {
    GRID_STRIDE_LOOP(i, n) y[i] = key_visible(i, T, S, causal) ? pointwise::Relu2::f(x[i]) * scale : 0.f;
}

__global__ void masked_relu2_backward_kernel(const float* x, const float* dy, float* dx, int64_t n, int64_t T,
                                             int64_t S, float scale, bool causal) {
    GRID_STRIDE_LOOP(i, n) {
        dx[i] = key_visible(i, T, S, causal) ? (dy[i] * scale) * pointwise::Relu2::df(x[i], 0.f) : 0.f;
    }
}

void masked_relu2_forward(const float* x, float* y, int64_t outer, int64_t T, int64_t S, float scale, bool causal) {
    const int64_t n = outer * T * S;
    if (n == 0) return;
    KERNEL_LAUNCH(masked_relu2_forward_kernel, blocks_for(n), kBlockSize, 0, x, y, n, T, S, scale, causal);
}

void masked_relu2_backward(const float* x, const float* dy, float* dx, int64_t outer, int64_t T, int64_t S,
                           float scale, bool causal) {
    const int64_t n = outer * T * S;
    if (n == 0) return;
    KERNEL_LAUNCH(masked_relu2_backward_kernel, blocks_for(n), kBlockSize, 0, x, dy, dx, n, T, S, scale, causal);
}

// ---------------------------------------------------------------------------------------------
// pow with a float exponent, and gradient accumulation.

__global__ void pow_forward_kernel(const float* x, float p, float* y, int64_t n) {
    GRID_STRIDE_LOOP(i, n) y[i] = powf(x[i], p);
}

__global__ void pow_backward_kernel(const float* x, float p, const float* dy, float* dx, int64_t n) {
    GRID_STRIDE_LOOP(i, n) dx[i] = dy[i] * p * powf(x[i], p - 1.f);
}

void pow_forward(const float* x, float p, float* y, int64_t n) {
    if (n == 0) return;
    KERNEL_LAUNCH(pow_forward_kernel, blocks_for(n), kBlockSize, 0, x, p, y, n);
}

void pow_backward(const float* x, float p, const float* dy, float* dx, int64_t n) {
    if (n == 0) return;
    KERNEL_LAUNCH(pow_backward_kernel, blocks_for(n), kBlockSize, 0, x, p, dy, dx, n);
}

__global__ void add_inplace_kernel(float* dst, const float* src, int64_t n) {
    GRID_STRIDE_LOOP(i, n) dst[i] += src[i];
}

__global__ void add_inplace4_kernel(float4* dst, const float4* src, int64_t n4) {
    GRID_STRIDE_LOOP(i, n4) {
        float4 d = dst[i];
        const float4 s = src[i];
        d.x += s.x;
        d.y += s.y;
        d.z += s.z;
        d.w += s.w;
        dst[i] = d;
    }
}

void add_inplace(float* dst, const float* src, int64_t n) {
    if (n == 0) return;
    if (float4_ok(n, {dst, src}))
        KERNEL_LAUNCH(add_inplace4_kernel, blocks_for(n / 4), kBlockSize, 0, (float4*)dst, (const float4*)src, n / 4);
    else
        KERNEL_LAUNCH(add_inplace_kernel, blocks_for(n), kBlockSize, 0, dst, src, n);
}

}  // namespace engine::cuda
