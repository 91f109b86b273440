// engine/tensor.h: the Tensor handle, its storage, and the autograd fields it carries.
//
// A Tensor is a cheap, copyable handle (shared_ptr) to a TensorImpl: shared storage + offset +
// shape, always contiguous row-major. Views (reshape/view/flatten, narrow on dim 0) share the
// storage; transpose/permute make contiguous copies (a strided engine is not needed here).
// dtype is float32, or int32 for indices. The device is CPU or CUDA: a CUDA tensor's storage is
// device memory (engine/cuda/runtime.h) that host code never dereferences: data_f32() refuses it,
// and an op hands raw_f32() to the kernel of the tensor's device (engine/ops/dispatch.h).
//
// Autograd fields live on the impl: requires_grad, grad, and grad_fn (the Node that made it).
// See engine/autograd.h for how backward() walks them.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace engine {

enum class DType { F32, I32 };
enum class Device { CPU, CUDA };

const char* dtype_name(DType t);
const char* device_name(Device d);

// ---------------------------------------------------------------------------------------------
// Shape: up to 6 dims, stored inline (no allocation when copied).

constexpr int kMaxDims = 6;

struct Shape {
    std::array<int64_t, kMaxDims> d{};
    int ndim = 0;

    Shape() = default;
    Shape(std::initializer_list<int64_t> dims);
    explicit Shape(const std::vector<int64_t>& dims);

    int64_t numel() const;
    int64_t operator[](int i) const { return d[i]; }
    int64_t& operator[](int i) { return d[i]; }
    int64_t size(int dim) const;  // negative dims count from the end
    bool operator==(const Shape& o) const;
    bool operator!=(const Shape& o) const { return !(*this == o); }
    std::vector<int64_t> vec() const { return {d.begin(), d.begin() + ndim}; }
    std::string str() const;  // "[2,3,4]"
};

// Wrap a negative dim and check it is in range; `op` names the caller for the error message.
int normalize_dim(int dim, int ndim, const char* op);

// ---------------------------------------------------------------------------------------------
// Storage: one allocation, shared by every view of it.

struct Storage {
    void* data = nullptr;
    size_t nbytes = 0;
    Device device = Device::CPU;
    Storage(size_t nbytes, Device device);
    ~Storage();
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;
};

// Host memory held by CPU tensors' storages, and its peak since the last reset: what the tensors
// themselves need, without the allocator's slack (the process's peak RSS adds that).
size_t host_memory_in_use();
size_t host_peak_memory();
void reset_host_peak_memory();

// A test instrument: while on, every new CPU storage is filled with the NaN pattern 0x7FBADBAD
// (also a huge int32), as the CUDA emulator fills device memory. Fresh memory from malloc often
// reads as zeros, so an op that forgets to write part of its output (or to zero a sum it adds
// into) passes its tests by luck; poisoned, it shows NaN. The test runner turns it on (off by
// default: the fill costs a pass over every allocation); INITLAB_POISON_HOST=1 turns it on in any
// program.
void set_poison_host_memory(bool on);
bool poison_host_memory();

struct Node;
class Tensor;

struct TensorImpl {
    std::shared_ptr<Storage> storage;
    int64_t offset = 0;  // in elements
    Shape shape;
    DType dtype = DType::F32;
    bool requires_grad = false;
    std::shared_ptr<TensorImpl> grad;     // accumulated gradient (same shape), or null
    std::shared_ptr<Node> grad_fn;        // the op that produced this tensor, or null for a leaf
    // How many Node::inputs lists hold this tensor (engine/autograd.cpp keeps the count). Once the
    // handles in those lists are all that is left of it, nothing can read its data any more (a
    // closure that needs an input holds a handle of its own): the last other handle to let go
    // releases the storage, and the graph keeps only shape and autograd state for the backward.
    // Graphs are built on one thread, so a plain counter.
    int node_refs = 0;
    ~TensorImpl();
};

// ---------------------------------------------------------------------------------------------

class Tensor {
public:
    Tensor() = default;
    explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
    Tensor(const Tensor&) = default;
    Tensor(Tensor&&) noexcept = default;
    Tensor& operator=(const Tensor& o) {
        if (impl_ != o.impl_) {
            release_if_graph_only();
            impl_ = o.impl_;
        }
        return *this;
    }
    Tensor& operator=(Tensor&& o) noexcept {
        if (this != &o) {
            release_if_graph_only();
            impl_ = std::move(o.impl_);
        }
        return *this;
    }
    ~Tensor() { release_if_graph_only(); }

    // Factories. Random ones draw from the global generator (engine/rng.h).
    static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::CPU);
    static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::CPU);
    static Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::CPU);
    static Tensor full(const Shape& shape, float value, DType dtype = DType::F32, Device device = Device::CPU);
    static Tensor arange(int64_t n, DType dtype = DType::F32);  // 0, 1, ..., n-1
    static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
    static Tensor from_vector(const std::vector<int32_t>& values, const Shape& shape);
    static Tensor uniform(const Shape& shape, float low = 0.f, float high = 1.f);
    static Tensor normal(const Shape& shape, float mean = 0.f, float std = 1.f);
    static Tensor trunc_normal(const Shape& shape, float mean, float std, float a, float b);
    static Tensor randint(const Shape& shape, int32_t low, int32_t high);  // [low, high)

    bool defined() const { return impl_ != nullptr; }
    TensorImpl* impl() const { return impl_.get(); }
    const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

    const Shape& shape() const;
    int ndim() const { return shape().ndim; }
    int64_t size(int dim) const { return shape().size(dim); }
    int64_t numel() const { return shape().numel(); }
    DType dtype() const;
    Device device() const;
    bool is_cuda() const { return device() == Device::CUDA; }
    bool same_storage(const Tensor& o) const;

    // Host data (the caller must know the dtype). Checked: throws on a dtype mismatch, and on a
    // CUDA tensor (host code must not touch device memory: copy it with .to(Device::CPU)).
    float* data_f32() const;
    int32_t* data_i32() const;
    // The data on the tensor's own device, only for a kernel of that device (engine/cpu/ or
    // engine/cuda/, chosen by ON_DEVICE in engine/ops/dispatch.h). Checked for the dtype only.
    float* raw_f32() const;
    int32_t* raw_i32() const;

    // New tensors on this tensor's device (the ops make their outputs and gradients with these).
    Tensor new_empty(const Shape& shape, DType dtype = DType::F32) const;
    Tensor new_zeros(const Shape& shape, DType dtype = DType::F32) const;
    Tensor new_full(const Shape& shape, float value, DType dtype = DType::F32) const;

    // Element access for tests and small host-side code; on a CUDA tensor each call copies (and
    // waits for the device). Indices may be negative.
    float item() const;  // one-element tensor
    float at(std::initializer_list<int64_t> idx) const;
    void set(std::initializer_list<int64_t> idx, float v);
    std::vector<float> to_vector() const;  // float32 or int32 (converted)

    // Views sharing storage (they are also autograd ops, so gradients flow through them).
    Tensor reshape(const Shape& shape) const;  // one dim may be -1
    Tensor view(const Shape& shape) const { return reshape(shape); }
    Tensor flatten(int start_dim = 0, int end_dim = -1) const;
    Tensor narrow(int dim, int64_t start, int64_t length) const;  // view on dim 0, copy otherwise

    // Contiguous copy that shares nothing.
    Tensor clone() const;
    // A copy on `device` (this tensor itself when it is there already); differentiable: the
    // gradient goes back to this tensor's device.
    Tensor to(Device device) const;

    // Autograd.
    bool requires_grad() const;
    Tensor& requires_grad_(bool on = true);
    Tensor grad() const;  // undefined Tensor when no gradient has been accumulated
    void zero_grad();     // drops the accumulated gradient
    void set_grad(const Tensor& g);
    Tensor detach() const;  // shares storage, no grad_fn, requires_grad false
    void backward() const;  // scalar output: d(self)/d(self) = 1
    void backward(const Tensor& grad_output) const;

    std::string str(int max_per_dim = 6) const;  // readable printing, used by fmt too

private:
    // As this handle lets go of impl_: if the only holders left are Node::inputs lists, free the
    // data (see TensorImpl::node_refs). In a training step this frees, before the backward, every
    // activation that no backward needs (a residual add's inputs, a dropout's input, ...).
    void release_if_graph_only() noexcept {
        if (impl_ && impl_->node_refs > 0 && impl_.use_count() - 1 == impl_->node_refs) impl_->storage.reset();
    }
    std::shared_ptr<TensorImpl> impl_;
};

}  // namespace engine
