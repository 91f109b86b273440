// engine/ops/common.h: argument checks shared by the ops. Messages name the op and the shapes.
#pragma once
#include <utility>
#include "engine/error.h"
#include "engine/tensor.h"

namespace engine {

inline void expect_defined(const char* op, const Tensor& t, const char* what) {
    check(t.defined(), "{}: {} is undefined", op, what);
}

inline void expect_f32(const char* op, const Tensor& t, const char* what = "input") {
    expect_defined(op, t, what);
    check(t.dtype() == DType::F32, "{}: {} {} must be float32, got {}", op, what, t.shape().str(), dtype_name(t.dtype()));
}

inline void expect_i32(const char* op, const Tensor& t, const char* what = "index") {
    expect_defined(op, t, what);
    check(t.dtype() == DType::I32, "{}: {} {} must be int32, got {}", op, what, t.shape().str(), dtype_name(t.dtype()));
}

inline void expect_same_device(const char* op, const Tensor& a, const Tensor& b) {
    check(a.device() == b.device(), "{}: {} is on {} but {} is on {}", op, a.shape().str(), device_name(a.device()),
          b.shape().str(), device_name(b.device()));
}

inline void expect_ndim(const char* op, const Tensor& t, int ndim, const char* what = "input") {
    check(t.ndim() == ndim, "{}: {} must be {}-d, got {}", op, what, ndim, t.shape().str());
}

// A LayerNorm's optional weight and bias over x's last dim (each undefined, or f32 [x.size(-1)] on
// x's device; the messages call them weight_name and bias_name) and its eps >= 0.
inline void expect_layer_norm_params(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     float eps, const char* weight_name = "weight", const char* bias_name = "bias") {
    for (auto [p, what] : {std::pair{&weight, weight_name}, std::pair{&bias, bias_name}}) {
        if (!p->defined()) continue;
        expect_f32(op, *p, what);
        expect_same_device(op, x, *p);
        check(p->ndim() == 1 && p->size(0) == x.size(-1), "{}: {} {} does not match the last dim of input {}", op,
              what, p->shape().str(), x.shape().str());
    }
    check(eps >= 0.f, "{}: eps must be >= 0, got {}", op, eps);
}

}  // namespace engine
