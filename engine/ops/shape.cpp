// engine/ops/shape.cpp: data-movement ops, forward and backward side by side. Each runs on its
// input's device (ON_DEVICE picks engine/cpu/shape.cpp or engine/cuda/shape.cu) and makes its
// outputs and gradients there; inputs on different devices are an error naming the op.
//
// Index checks: on the CPU the indices are read directly, and a bad one is an error at once. On the
// GPU a kernel checks them (cuda::check_indices) and the op goes on without waiting for it: the
// first bad index is reported, with the CPU's message, at the host's next wait for the device
// (engine/cuda/runtime.h), and the kernels leave its row alone meanwhile.
//
// causal_mask(T) keeps its signature and makes a CPU tensor (callers move it with .to(device)).
#include "engine/ops/shape.h"

#include <cstring>
#include <numeric>
#include "engine/autograd.h"
#include "engine/cpu/shape.h"
#include "engine/ops/common.h"
#include "engine/ops/dispatch.h"
#include "engine/ops/elementwise.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/runtime.h"
#include "engine/cuda/shape.h"
#endif

namespace engine {

static void split_at(const Shape& s, int d, int64_t& outer, int64_t& n, int64_t& inner) {
    outer = 1; inner = 1; n = s[d];
    for (int i = 0; i < d; i++) outer *= s[i];
    for (int i = d + 1; i < s.ndim; i++) inner *= s[i];
}

// Float32 or int32 (targets, ids): the kernels move 4-byte elements without reading them.
Tensor permute(const Tensor& x, std::vector<int> dims) {
    check(x.defined(), "permute: undefined input");
    const Shape& xs = x.shape();
    check((int)dims.size() == xs.ndim, "permute: {} dims given for a tensor of shape {}", dims.size(), xs.str());
    std::vector<bool> seen(xs.ndim, false);
    for (int& d : dims) {
        d = normalize_dim(d, xs.ndim, "permute");
        check(!seen[d], "permute: dim {} repeated for shape {}", d, xs.str());
        seen[d] = true;
    }
    Shape os = xs;
    for (int i = 0; i < xs.ndim; i++) os[i] = xs[dims[i]];
    Tensor out = Tensor::empty(os, x.dtype(), x.device());
    auto elements = [](const Tensor& t) {  // the kernels' float pointers, whatever 4-byte type t holds
        return t.dtype() == DType::I32 ? reinterpret_cast<float*>(t.raw_i32()) : t.raw_f32();
    };
    ON_DEVICE(x.device(), permute)(elements(x), xs, dims.data(), elements(out));
    std::vector<int> inverse(dims.size());
    for (int i = 0; i < (int)dims.size(); i++) inverse[dims[i]] = i;
    return attach(out, "permute", {x}, [inverse](const Tensor& g) { return std::vector<Tensor>{permute(g, inverse)}; });
}

Tensor transpose(const Tensor& x, int dim0, int dim1) {
    int nd = x.ndim();
    std::vector<int> perm(nd);
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[normalize_dim(dim0, nd, "transpose")], perm[normalize_dim(dim1, nd, "transpose")]);
    return permute(x, perm);
}

Tensor slice(const Tensor& x, int dim, int64_t start, int64_t end) {
    expect_f32("slice", x);
    const Shape& xs = x.shape();
    int d = normalize_dim(dim, xs.ndim, "slice");
    check(0 <= start && start <= end && end <= xs[d], "slice: [{}, {}) out of range for dim {} of {}", start, end, dim,
          xs.str());
    int64_t outer, n, inner;
    split_at(xs, d, outer, n, inner);
    Shape os = xs;
    os[d] = end - start;
    Tensor out = x.new_empty(os);
    ON_DEVICE(x.device(), copy_middle)(x.raw_f32(), outer, n, inner, start, end - start, out.raw_f32());
    return attach(out, "slice", {x}, [xs, outer, n, inner, start, end](const Tensor& g) {
        Tensor dx = g.new_zeros(xs);
        ON_DEVICE(g.device(), place_middle)(g.raw_f32(), outer, n, inner, start, end - start, dx.raw_f32());
        return std::vector<Tensor>{dx};
    });
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim) {
    int d = normalize_dim(dim, x.ndim(), "split");
    int64_t total = std::accumulate(sizes.begin(), sizes.end(), (int64_t)0);
    check(total == x.size(d), "split: sizes add up to {} but dim {} of {} is {}", total, dim, x.shape().str(), x.size(d));
    std::vector<Tensor> parts;
    int64_t at = 0;
    for (int64_t s : sizes) {
        parts.push_back(slice(x, d, at, at + s));
        at += s;
    }
    return parts;
}

std::vector<Tensor> chunk(const Tensor& x, int chunks, int dim) {
    int d = normalize_dim(dim, x.ndim(), "chunk");
    check(chunks > 0 && x.size(d) % chunks == 0, "chunk: dim {} of {} does not split into {} equal parts", dim,
          x.shape().str(), chunks);
    return split(x, std::vector<int64_t>(chunks, x.size(d) / chunks), d);
}

Tensor concat(const std::vector<Tensor>& xs, int dim) {
    check(!xs.empty(), "concat: no tensors given");
    for (const Tensor& t : xs) {
        expect_f32("concat", t);
        expect_same_device("concat", xs[0], t);
    }
    const Shape& s0 = xs[0].shape();
    int d = normalize_dim(dim, s0.ndim, "concat");
    Shape os = s0;
    os[d] = 0;
    for (const Tensor& t : xs) {
        const Shape& s = t.shape();
        bool ok = s.ndim == s0.ndim;
        for (int i = 0; ok && i < s0.ndim; i++) ok = i == d || s[i] == s0[i];
        check(ok, "concat: shape {} does not match {} outside dim {}", s.str(), s0.str(), dim);
        os[d] += s[d];
    }
    Tensor out = xs[0].new_empty(os);
    int64_t outer, n, inner, at = 0;
    split_at(os, d, outer, n, inner);
    std::vector<int64_t> sizes;
    for (const Tensor& t : xs) {
        ON_DEVICE(out.device(), place_middle)(t.raw_f32(), outer, n, inner, at, t.size(d), out.raw_f32());
        at += t.size(d);
        sizes.push_back(t.size(d));
    }
    return attach(out, "concat", xs, [sizes, d](const Tensor& g) { return split(g, sizes, d); });
}

static void check_indices(const char* op, const int32_t* idx, int64_t m, int64_t n, const Shape& xs) {
    for (int64_t i = 0; i < m; i++)
        check(idx[i] >= 0 && idx[i] < n, "{}: index {} out of range [0, {}) at position {} for input {}", op, idx[i], n, i,
              xs.str());
}

// The indices of `index` in [0, n), else the error naming the first bad one (on the GPU: at the next
// wait for the device).
static void check_indices(const char* op, const Tensor& index, int64_t n, const Shape& xs) {
#ifdef ENGINE_CUDA
    if (index.is_cuda()) {
        const cuda::IndexOp which = std::strcmp(op, "embedding") == 0 ? cuda::IndexOp::embedding
                                    : std::strcmp(op, "gather") == 0  ? cuda::IndexOp::gather
                                                                      : cuda::IndexOp::index_select;
        return cuda::check_indices(index.raw_i32(), index.numel(), n, which);
    }
#endif
    check_indices(op, index.data_i32(), index.numel(), n, xs);
}

Tensor index_select(const Tensor& x, int dim, const Tensor& index) {
    expect_f32("index_select", x);
    expect_i32("index_select", index);
    expect_same_device("index_select", x, index);
    check(index.ndim() == 1, "index_select: index must be 1-d, got {}", index.shape().str());
    const Shape& xs = x.shape();
    int d = normalize_dim(dim, xs.ndim, "index_select");
    int64_t outer, n, inner, m = index.numel();
    split_at(xs, d, outer, n, inner);
    check_indices("index_select", index, n, xs);
    Shape os = xs;
    os[d] = m;
    Tensor out = x.new_empty(os);
    ON_DEVICE(x.device(), index_select)(x.raw_f32(), outer, n, inner, index.raw_i32(), m, out.raw_f32());
    return attach(out, "index_select", {x}, [xs, index, outer, n, inner, m](const Tensor& g) {
        Tensor dx = g.new_zeros(xs);
        ON_DEVICE(g.device(), index_add)(g.raw_f32(), outer, n, inner, index.raw_i32(), m, dx.raw_f32());
        return std::vector<Tensor>{dx};
    });
}

Tensor gather(const Tensor& x, int dim, const Tensor& index) {
    expect_f32("gather", x);
    expect_i32("gather", index);
    expect_same_device("gather", x, index);
    const Shape &xs = x.shape(), &is = index.shape();
    int d = normalize_dim(dim, xs.ndim, "gather");
    bool ok = is.ndim == xs.ndim;
    for (int i = 0; ok && i < xs.ndim; i++) ok = i == d || is[i] == xs[i];
    check(ok, "gather: index {} must match input {} outside dim {}", is.str(), xs.str(), dim);
    int64_t outer, n, inner, m = is[d];
    split_at(xs, d, outer, n, inner);
    check_indices("gather", index, n, xs);
    Tensor out = x.new_empty(is);
    ON_DEVICE(x.device(), gather)(x.raw_f32(), outer, n, inner, index.raw_i32(), m, out.raw_f32());
    return attach(out, "gather", {x}, [xs, index, outer, n, inner, m](const Tensor& g) {
        Tensor dx = g.new_zeros(xs);
        ON_DEVICE(g.device(), gather_backward)(g.raw_f32(), outer, n, inner, index.raw_i32(), m, dx.raw_f32());
        return std::vector<Tensor>{dx};
    });
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
    expect_f32("embedding", weight, "weight");
    expect_i32("embedding", ids, "ids");
    expect_same_device("embedding", weight, ids);
    check(weight.ndim() == 2, "embedding: weight must be [V, D], got {}", weight.shape().str());
    check(ids.ndim() < kMaxDims, "embedding: ids {} have too many dims", ids.shape().str());
    int64_t V = weight.size(0), D = weight.size(1), m = ids.numel();
    check_indices("embedding", ids, V, weight.shape());
    std::vector<int64_t> od = ids.shape().vec();
    od.push_back(D);
    Tensor out = weight.new_empty(Shape(od));
    ON_DEVICE(weight.device(), index_select)(weight.raw_f32(), 1, V, D, ids.raw_i32(), m, out.raw_f32());
    Shape ws = weight.shape();
    return attach(out, "embedding", {weight}, [ws, ids, V, D, m](const Tensor& g) {
        Tensor dw = g.new_zeros(ws);
        ON_DEVICE(g.device(), index_add)(g.raw_f32(), 1, V, D, ids.raw_i32(), m, dw.raw_f32());
        return std::vector<Tensor>{dw};
    });
}

// out = mask ? value : x;  dx = mask ? 0 : g (the same kernel on the gradient, with value 0).
Tensor masked_fill(const Tensor& x, const Tensor& mask, float value) {
    expect_f32("masked_fill", x);
    expect_f32("masked_fill", mask, "mask");
    expect_same_device("masked_fill", x, mask);
    Shape bs = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
    check(bs == x.shape(), "masked_fill: mask {} does not broadcast to input {}", mask.shape().str(), x.shape().str());
    Tensor out = x.new_empty(x.shape());
    ON_DEVICE(x.device(), masked_fill)(x.raw_f32(), x.shape(), mask.raw_f32(), mask.shape(), value, out.raw_f32());
    Tensor m = mask.detach();
    return attach(out, "masked_fill", {x}, [m](const Tensor& g) {
        Tensor dx = g.new_empty(g.shape());
        ON_DEVICE(g.device(), masked_fill)(g.raw_f32(), g.shape(), m.raw_f32(), m.shape(), 0.f, dx.raw_f32());
        return std::vector<Tensor>{dx};
    });
}

Tensor causal_mask(int64_t T) {
    Tensor m = Tensor::zeros({T, T});
    float* p = m.data_f32();
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = i + 1; j < T; j++) p[i * T + j] = 1.f;
    return m;
}

}  // namespace engine
