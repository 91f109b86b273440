// engine/ops/reduce.cpp: sum, mean, max over dims; sum_to. Forward and backward side by side.
// Each runs on its input's device (ON_DEVICE picks engine/cpu/reduce.cpp or engine/cuda/reduce.cu)
// and makes its outputs and gradients there.
#include "engine/ops/reduce.h"

#include <algorithm>
#include <cstdint>
#include "engine/autograd.h"
#include "engine/cpu/reduce.h"
#include "engine/ops/common.h"
#include "engine/ops/dispatch.h"
#include "engine/ops/elementwise.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/reduce.h"
#endif

namespace engine {

// Sorted, unique, non-negative dims; empty input means all dims.
static std::vector<int> normalize_dims(std::vector<int> dims, int ndim, const char* op) {
    if (dims.empty())
        for (int i = 0; i < ndim; i++) dims.push_back(i);
    for (int& d : dims) d = normalize_dim(d, ndim, op);
    std::sort(dims.begin(), dims.end());
    dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
    return dims;
}

static void split_at(const Shape& s, int d, int64_t& outer, int64_t& n, int64_t& inner) {
    outer = 1; inner = 1; n = s[d];
    for (int i = 0; i < d; i++) outer *= s[i];
    for (int i = d + 1; i < s.ndim; i++) inner *= s[i];
}

static Shape reduced_shape(const Shape& s, const std::vector<int>& dims, bool keepdim) {
    std::vector<int64_t> out;
    for (int i = 0; i < s.ndim; i++) {
        bool r = std::find(dims.begin(), dims.end(), i) != dims.end();
        if (!r) out.push_back(s[i]);
        else if (keepdim) out.push_back(1);
    }
    return Shape(out);
}

// Broadcast g (with keepdim shape) back to `shape`.
static Tensor expand_to(const Tensor& g, const Shape& shape) { return add(g.new_zeros(shape), g); }

Tensor sum(const Tensor& x, std::vector<int> dims, bool keepdim) {
    expect_f32("sum", x);
    dims = normalize_dims(dims, x.ndim(), "sum");
    Tensor cur = x.detach();
    for (int k = (int)dims.size() - 1; k >= 0; k--) {  // last dim first, so earlier indices stay valid
        int64_t outer, n, inner;
        split_at(cur.shape(), dims[k], outer, n, inner);
        Shape s = cur.shape();
        s[dims[k]] = 1;
        Tensor next = cur.new_empty(s);
        ON_DEVICE(cur.device(), sum_dim)(cur.raw_f32(), next.raw_f32(), outer, n, inner);
        cur = next;
    }
    Shape keep_shape = cur.shape(), xs = x.shape();
    Tensor out = keepdim ? cur : cur.reshape(reduced_shape(xs, dims, false));
    return attach(out, "sum", {x}, [keep_shape, xs](const Tensor& g) {
        return std::vector<Tensor>{expand_to(g.reshape(keep_shape), xs)};
    });
}

Tensor mean(const Tensor& x, std::vector<int> dims, bool keepdim) {
    expect_f32("mean", x);
    dims = normalize_dims(dims, x.ndim(), "mean");
    int64_t count = 1;
    for (int d : dims) count *= x.shape()[d];
    check(count > 0, "mean: reducing {} over an empty dim", x.shape().str());
    return mul(sum(x, dims, keepdim), 1.f / (float)count);
}

static Tensor max_one_dim(const Tensor& x, int d) {
    int64_t outer, n, inner;
    split_at(x.shape(), d, outer, n, inner);
    check(n > 0, "max: reducing {} over an empty dim {}", x.shape().str(), d);
    check(n <= INT32_MAX, "max: dim {} of {} is longer than the int32 indices of its argmax", d, x.shape().str());
    Shape s = x.shape();
    s[d] = 1;
    Tensor out = x.new_empty(s), argmax = x.new_empty(s, DType::I32);
    ON_DEVICE(x.device(), max_dim)(x.raw_f32(), out.raw_f32(), argmax.raw_i32(), outer, n, inner);
    Shape xs = x.shape();
    return attach(out, "max", {x}, [xs, argmax, outer, n, inner](const Tensor& g) {
        expect_same_device("max", argmax, g);
        Tensor dx = argmax.new_empty(xs);
        ON_DEVICE(argmax.device(), max_dim_backward)(g.raw_f32(), argmax.raw_i32(), dx.raw_f32(), outer, n, inner);
        return std::vector<Tensor>{dx};
    });
}

Tensor max(const Tensor& x, std::vector<int> dims, bool keepdim) {
    expect_f32("max", x);
    dims = normalize_dims(dims, x.ndim(), "max");
    Tensor cur = x;
    for (int d : dims) cur = max_one_dim(cur, d);  // keepdim shapes: dims keep their positions
    return keepdim ? cur : cur.reshape(reduced_shape(x.shape(), dims, false));
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
    const Shape& xs = x.shape();
    if (xs == shape) return x;
    check(shape.ndim <= xs.ndim, "sum_to: cannot reduce {} to {}", xs.str(), shape.str());
    int lead = xs.ndim - shape.ndim;
    std::vector<int> dims;
    for (int i = 0; i < xs.ndim; i++) {
        if (i < lead) dims.push_back(i);
        else if (shape[i - lead] == 1 && xs[i] != 1) dims.push_back(i);
        else check(shape[i - lead] == xs[i], "sum_to: cannot reduce {} to {}", xs.str(), shape.str());
    }
    return sum(x, dims, true).reshape(shape);
}

}  // namespace engine
