// engine/cuda/optim.cu: optimizer updates and the gradient norm's reductions (engine/cuda/optim.h).
// The updates are elementwise (grid-stride, coalesced) over a list of parameter tensors; the state
// tensors are read and written in the same pass, so each step is
// one read of w, g, m, v and one write of w, m, v: memory bound, as on the CPU.
#include "engine/cuda/kernel.h"
#include "engine/cuda/optim.h"

namespace engine::cuda {

// ---------------------------------------------------------------------------------------------
// Multi-tensor forms: one launch over a list of tensors (engine/multi_tensor.h) instead of one per
// tensor; a ViT-Tiny step has ~150 parameter tensors, and each launch costs a few µs of host time.

// The tensor of a list that holds element i of the list's concatenation: the last t with
// offset[t] <= i (binary search over at most kMaxListTensors + 1 offsets).
__device__ __forceinline__ int list_tensor(const int64_t* offset, int count, int64_t i) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (offset[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// The arithmetic of engine/cpu/optim.cpp's sgd_step, element by element. With `scalars` (a
// captured step), the learning rate and the first-step flag come from device memory.
__global__ void sgd_step_multi_kernel(SgdTensorList list, float momentum, bool nesterov, bool first,
                                      const float* scalars) {
    if (scalars) first = scalars[1] != 0.f;
    GRID_STRIDE_LOOP(i, list.offset[list.count]) {
        int t = list_tensor(list.offset, list.count, i);
        int64_t j = i - list.offset[t];
        float lr = scalars ? scalars[0] * list.lr[t] : list.lr[t];
        float wj = list.w[t][j];
        float d = list.g[t][j] + list.weight_decay[t] * wj;
        if (float* buf = list.buf[t]) {
            float b = first ? d : momentum * buf[j] + d;  // PyTorch starts the buffer at the first gradient
            buf[j] = b;
            d = nesterov ? d + momentum * b : b;
        }
        list.w[t][j] = wj - lr * d;
    }
}

void sgd_step_multi(const SgdTensorList& list, float momentum, bool nesterov, bool first) {
    int64_t n = list.count > 0 ? list.offset[list.count] : 0;
    if (n == 0) return;
    KERNEL_LAUNCH(sgd_step_multi_kernel, blocks_for(n), kBlockSize, 0, list, momentum, nesterov, first,
                  (const float*)nullptr);
}

void sgd_step_multi_device(const SgdTensorList& list, float momentum, bool nesterov, const float* scalars) {
    int64_t n = list.count > 0 ? list.offset[list.count] : 0;
    if (n == 0) return;
    KERNEL_LAUNCH(sgd_step_multi_kernel, blocks_for(n), kBlockSize, 0, list, momentum, nesterov, false, scalars);
}

// The arithmetic of engine/cpu/optim.cpp's adam_step, element by element.
// With `scalars` (a captured step), the learning rate and bias corrections come from device memory.
__global__ void adam_step_multi_kernel(AdamTensorList list, float b1, float b2, float eps, float bc1, float sqrt_bc2,
                                       bool decoupled, const float* scalars) {
    if (scalars) {
        bc1 = scalars[1];
        sqrt_bc2 = scalars[2];
    }
    GRID_STRIDE_LOOP(i, list.offset[list.count]) {
        int t = list_tensor(list.offset, list.count, i);
        int64_t j = i - list.offset[t];
        float lr = scalars ? scalars[0] * list.lr[t] : list.lr[t], wd = list.weight_decay[t], step_size = lr / bc1;
        float d = list.g[t][j], wj = list.w[t][j];
        if (decoupled) wj -= lr * wd * wj;
        else d += wd * wj;
        float mj = b1 * list.m[t][j] + (1.f - b1) * d;
        float vj = b2 * list.v[t][j] + (1.f - b2) * d * d;
        list.m[t][j] = mj;
        list.v[t][j] = vj;
        list.w[t][j] = wj - step_size * mj / (sqrtf(vj) / sqrt_bc2 + eps);
    }
}

void adam_step_multi(const AdamTensorList& list, float b1, float b2, float eps, float bc1, float bc2, bool decoupled) {
    int64_t n = list.count > 0 ? list.offset[list.count] : 0;
    if (n == 0) return;
    KERNEL_LAUNCH(adam_step_multi_kernel, blocks_for(n), kBlockSize, 0, list, b1, b2, eps, bc1, sqrtf(bc2), decoupled,
                  (const float*)nullptr);
}

void adam_step_multi_device(const AdamTensorList& list, float b1, float b2, float eps, bool decoupled,
                            const float* scalars) {
    int64_t n = list.count > 0 ? list.offset[list.count] : 0;
    if (n == 0) return;
    KERNEL_LAUNCH(adam_step_multi_kernel, blocks_for(n), kBlockSize, 0, list, b1, b2, eps, 1.f, 1.f, decoupled, scalars);
}

// ---------------------------------------------------------------------------------------------
// Sum of squares: double accumulators (as the CPU), a warp-shuffle tree inside each warp, then the
// warps' sums through shared memory. Fixed trees: the same n gives the same bits on every run.

constexpr int kReduceThreads = 256;     // a multiple of 32: every warp is full for the shuffles
constexpr int kMaxPartialBlocks = 512;  // first-pass blocks at most (enough to fill an H100 twice)

__device__ __forceinline__ double warp_sum(double v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// The block's sum, valid in thread 0. `warp_sums` is 32 doubles of shared memory.
__device__ __forceinline__ double block_sum(double v, double* warp_sums) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int warps = (int)(blockDim.x >> 5);
        v = lane < warps ? warp_sums[lane] : 0.0;
        v = warp_sum(v);
    }
    return v;
}

__global__ void sum_partials_kernel(const double* partial, int count, double* out) {
    SHARED_ARRAY(double, warp_sums, 32);
    double acc = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
    acc = block_sum(acc, warp_sums);
    if (threadIdx.x == 0) *out = acc;
}

// The first pass over a whole list: each block sums the squares of its grid-stride share of the
// list's concatenation (the grid depends on the total size only).
__global__ void sum_squares_multi_partial_kernel(ConstTensorList list, double* partial) {
    SHARED_ARRAY(double, warp_sums, 32);
    double acc = 0.0;
    GRID_STRIDE_LOOP(i, list.offset[list.count]) {
        int t = list_tensor(list.offset, list.count, i);
        double xi = (double)list.x[t][i - list.offset[t]];
        acc += xi * xi;
    }
    acc = block_sum(acc, warp_sums);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

void sum_squares_multi(const ConstTensorList& list, double* out) {
    int64_t n = list.count > 0 ? list.offset[list.count] : 0;
    if (n == 0) {
        memset_zero(out, sizeof(double));  // a double 0.0 is all zero bits
        return;
    }
    unsigned blocks = blocks_for(n, kReduceThreads);
    if (blocks > (unsigned)kMaxPartialBlocks) blocks = kMaxPartialBlocks;
    if (blocks == 1) {
        KERNEL_LAUNCH(sum_squares_multi_partial_kernel, 1, kReduceThreads, 0, list, out);
        return;
    }
    // Scratch from the stream-ordered pool: freed in stream order after the second pass.
    double* partial = static_cast<double*>(alloc(blocks * sizeof(double)));
    KERNEL_LAUNCH(sum_squares_multi_partial_kernel, blocks, kReduceThreads, 0, list, partial);
    KERNEL_LAUNCH(sum_partials_kernel, 1, kReduceThreads, 0, partial, (int)blocks, out);
    free(partial);
}

__global__ void scale_multi_kernel(TensorList list, float s, const float* device_s) {
    if (device_s) s = *device_s;
    GRID_STRIDE_LOOP(i, list.offset[list.count]) {
        int t = list_tensor(list.offset, list.count, i);
        list.x[t][i - list.offset[t]] *= s;
    }
}

void scale_multi(const TensorList& list, float s) {
    int64_t n = list.count > 0 ? list.offset[list.count] : 0;
    if (n == 0) return;
    KERNEL_LAUNCH(scale_multi_kernel, blocks_for(n), kBlockSize, 0, list, s, (const float*)nullptr);
}

void scale_multi_device(const TensorList& list, const float* scale) {
    int64_t n = list.count > 0 ? list.offset[list.count] : 0;
    if (n == 0) return;
    KERNEL_LAUNCH(scale_multi_kernel, blocks_for(n), kBlockSize, 0, list, 1.f, scale);
}

// One thread: the host's loop of nn::clip_grad_norm (the slots added in order in double).
__global__ void clip_scale_kernel(const double* slots, int64_t lists, float max_norm, float* norm, float* scale) {
    double total = 0.0;
    for (int64_t l = 0; l < lists; l++) total += slots[l];
    float n = (float)sqrt(total);
    norm[0] = n;
    scale[0] = n > max_norm && n > 0.f ? max_norm / (n + 1e-6f) : 1.f;
}

void clip_scale(const double* slots, int64_t lists, float max_norm, float* norm, float* scale) {
    KERNEL_LAUNCH(clip_scale_kernel, 1, 1, 0, slots, lists, max_norm, norm, scale);
}

}  // namespace engine::cuda
