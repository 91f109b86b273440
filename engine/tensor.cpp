// engine/tensor.cpp: Shape, Storage, Tensor factories, element access, views and printing.
#include "engine/tensor.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include "engine/autograd.h"
#include "engine/error.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/runtime.h"
#endif
#include "engine/ops.h"
#include "engine/rng.h"
#include <fmt/ranges.h>

namespace engine {

const char* dtype_name(DType t) { return t == DType::F32 ? "float32" : "int32"; }
const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

// ---------------------------------------------------------------------------------------------
// Shape

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
    check((int)dims.size() <= kMaxDims, "Shape: {} dims given, at most {} supported", dims.size(), kMaxDims);
    ndim = (int)dims.size();
    for (int i = 0; i < ndim; i++) {
        check(dims[i] >= 0 || dims[i] == -1, "Shape: negative dim {}", dims[i]);
        d[i] = dims[i];
    }
}

int64_t Shape::numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= d[i];
    return n;
}

int64_t Shape::size(int dim) const { return d[normalize_dim(dim, ndim, "size")]; }

bool Shape::operator==(const Shape& o) const {
    if (ndim != o.ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (d[i] != o.d[i]) return false;
    return true;
}

std::string Shape::str() const {
    return fmt::format("[{}]", fmt::join(d.begin(), d.begin() + ndim, ","));
}

int normalize_dim(int dim, int ndim, const char* op) {
    int d = dim < 0 ? dim + ndim : dim;
    check(d >= 0 && d < ndim, "{}: dim {} out of range for a {}-d tensor", op, dim, ndim);
    return d;
}

// ---------------------------------------------------------------------------------------------
// Storage: 64-byte aligned so SIMD loads never straddle cache lines.

// Activations of every step are allocated and freed again; glibc would serve large blocks with
// mmap and hand them back to the OS on free, so each step paid page faults on fresh memory.
// Keeping freed memory in the heap lets the next step reuse it.
static const bool g_malloc_keeps_memory = [] {
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
}();

static std::atomic<size_t> g_host_in_use{0}, g_host_peak{0};
size_t host_memory_in_use() { return g_host_in_use.load(); }
size_t host_peak_memory() { return g_host_peak.load(); }
void reset_host_peak_memory() { g_host_peak.store(g_host_in_use.load()); }

static size_t host_bytes(size_t n) { return (n + 63) / 64 * 64; }  // 64-byte aligned blocks

static std::atomic<bool> g_poison_host{[] {
    const char* v = std::getenv("INITLAB_POISON_HOST");
    return v && std::string(v) == "1";
}()};
void set_poison_host_memory(bool on) { g_poison_host = on; }
bool poison_host_memory() { return g_poison_host; }

Storage::Storage(size_t n, Device dev) : nbytes(n), device(dev) {
    if (dev == Device::CUDA) {
#ifdef ENGINE_CUDA
        data = cuda::alloc(n);
        return;
#else
        fail("Storage: this build has no CUDA backend (built without nvcc; make emu builds the emulated one)");
#endif
    }
    size_t rounded = host_bytes(n);
    data = rounded ? std::aligned_alloc(64, rounded) : nullptr;
    check(rounded == 0 || data != nullptr, "Storage: out of memory allocating {} bytes", n);
    if (g_poison_host) std::fill_n(static_cast<uint32_t*>(data), rounded / 4, 0x7FBADBADu);
    size_t in_use = g_host_in_use += rounded;
    size_t peak = g_host_peak.load();
    while (in_use > peak && !g_host_peak.compare_exchange_weak(peak, in_use)) {
    }
}

Storage::~Storage() {
#ifdef ENGINE_CUDA
    if (device == Device::CUDA) {
        try {
            cuda::free(data);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "warning: %s\n", e.what());  // a destructor must not throw
        }
        return;
    }
#endif
    g_host_in_use -= host_bytes(nbytes);
    std::free(data);
}

// Byte copies and fills on either device (the CPU build never sees a CUDA storage).
static void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
    if (bytes == 0) return;
#ifdef ENGINE_CUDA
    if (dst_dev == Device::CUDA && src_dev == Device::CUDA) return cuda::copy_on_device(dst, src, bytes);
    if (dst_dev == Device::CUDA) return cuda::copy_to_device(dst, src, bytes);
    if (src_dev == Device::CUDA) return cuda::copy_to_host(dst, src, bytes);
#endif
    std::memcpy(dst, src, bytes);
}

// Free a long graph iteratively: a chain of 10,000 ops would otherwise be destroyed by 10,000
// nested destructor calls (impl -> node -> input impl -> node ...) and could overflow the stack.
// Each node we own alone is taken apart here: its closure first (it holds only copies of handles
// that the inputs list also holds), then the grad_fn of every input we are the last owner of.
TensorImpl::~TensorImpl() {
    std::vector<std::shared_ptr<Node>> pending;
    if (grad_fn && grad_fn.use_count() == 1) pending.push_back(std::move(grad_fn));
    while (!pending.empty()) {
        std::shared_ptr<Node> node = std::move(pending.back());
        pending.pop_back();
        node->backward = nullptr;
        for (Tensor& in : node->inputs) {
            TensorImpl* impl = in.impl();
            if (impl && in.impl_ptr().use_count() == 1 && impl->grad_fn && impl->grad_fn.use_count() == 1)
                pending.push_back(std::move(impl->grad_fn));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Factories

static size_t dtype_size(DType) { return 4; }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
    for (int i = 0; i < shape.ndim; i++) check(shape[i] >= 0, "empty: invalid shape {}", shape.str());
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = std::make_shared<Storage>(shape.numel() * dtype_size(dtype), device);
    impl->shape = shape;
    impl->dtype = dtype;
    return Tensor(impl);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
    Tensor t = empty(shape, dtype, device);
    size_t nbytes = t.impl()->storage->nbytes;
#ifdef ENGINE_CUDA
    if (device == Device::CUDA) {
        cuda::memset_zero(t.impl()->storage->data, nbytes);
        return t;
    }
#endif
    if (nbytes) std::memset(t.impl()->storage->data, 0, nbytes);
    return t;
}

Tensor Tensor::full(const Shape& shape, float value, DType dtype, Device device) {
    Tensor t = empty(shape, dtype, device);
    int64_t n = t.numel();
#ifdef ENGINE_CUDA
    if (device == Device::CUDA) {
        if (dtype == DType::F32) cuda::fill_f32(t.raw_f32(), value, n);
        else cuda::fill_i32(t.raw_i32(), (int32_t)value, n);
        return t;
    }
#endif
    if (dtype == DType::F32) {
        float* p = t.data_f32();
        for (int64_t i = 0; i < n; i++) p[i] = value;
    } else {
        int32_t* p = t.data_i32();
        for (int64_t i = 0; i < n; i++) p[i] = (int32_t)value;
    }
    return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.f, dtype, device); }

Tensor Tensor::arange(int64_t n, DType dtype) {
    Tensor t = empty({n}, dtype);
    for (int64_t i = 0; i < n; i++) {
        if (dtype == DType::F32) t.data_f32()[i] = (float)i;
        else t.data_i32()[i] = (int32_t)i;
    }
    return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
    check((int64_t)values.size() == shape.numel(), "from_vector: {} values for shape {} ({} elements)",
          values.size(), shape.str(), shape.numel());
    Tensor t = empty(shape, DType::F32);
    if (!values.empty()) std::memcpy(t.data_f32(), values.data(), values.size() * sizeof(float));
    return t;
}

Tensor Tensor::from_vector(const std::vector<int32_t>& values, const Shape& shape) {
    check((int64_t)values.size() == shape.numel(), "from_vector: {} values for shape {} ({} elements)",
          values.size(), shape.str(), shape.numel());
    Tensor t = empty(shape, DType::I32);
    if (!values.empty()) std::memcpy(t.data_i32(), values.data(), values.size() * sizeof(int32_t));
    return t;
}

Tensor Tensor::uniform(const Shape& shape, float low, float high) {
    Tensor t = empty(shape);
    global_generator().uniform(t.data_f32(), t.numel(), low, high);
    return t;
}

Tensor Tensor::normal(const Shape& shape, float mean, float std) {
    Tensor t = empty(shape);
    global_generator().normal(t.data_f32(), t.numel(), mean, std);
    return t;
}

Tensor Tensor::trunc_normal(const Shape& shape, float mean, float std, float a, float b) {
    Tensor t = empty(shape);
    global_generator().trunc_normal(t.data_f32(), t.numel(), mean, std, a, b);
    return t;
}

Tensor Tensor::randint(const Shape& shape, int32_t low, int32_t high) {
    Tensor t = empty(shape, DType::I32);
    global_generator().randint(t.data_i32(), t.numel(), low, high);
    return t;
}

// ---------------------------------------------------------------------------------------------
// Accessors

static void check_defined(const TensorImpl* impl, const char* what) {
    check(impl != nullptr, "{}: the tensor is undefined", what);
}

const Shape& Tensor::shape() const { check_defined(impl_.get(), "shape"); return impl_->shape; }
DType Tensor::dtype() const { check_defined(impl_.get(), "dtype"); return impl_->dtype; }
Device Tensor::device() const { check_defined(impl_.get(), "device"); return impl_->storage->device; }
bool Tensor::same_storage(const Tensor& o) const { return impl_ && o.impl_ && impl_->storage == o.impl_->storage; }

float* Tensor::raw_f32() const {
    check_defined(impl_.get(), "raw_f32");
    check(impl_->dtype == DType::F32, "raw_f32: tensor {} is {}", shape().str(), dtype_name(impl_->dtype));
    return static_cast<float*>(impl_->storage->data) + impl_->offset;
}

int32_t* Tensor::raw_i32() const {
    check_defined(impl_.get(), "raw_i32");
    check(impl_->dtype == DType::I32, "raw_i32: tensor {} is {}", shape().str(), dtype_name(impl_->dtype));
    return static_cast<int32_t*>(impl_->storage->data) + impl_->offset;
}

static void check_host(const TensorImpl* impl, const char* what) {
    check_defined(impl, what);
    check(impl->storage->device == Device::CPU,
          "{}: tensor {} lives in CUDA device memory, which host code cannot read or write; copy it with "
          ".to(Device::CPU) (or run the op on the device)", what, impl->shape.str());
}

float* Tensor::data_f32() const {
    check_host(impl_.get(), "data_f32");
    return raw_f32();
}

int32_t* Tensor::data_i32() const {
    check_host(impl_.get(), "data_i32");
    return raw_i32();
}

Tensor Tensor::new_empty(const Shape& s, DType dt) const { return empty(s, dt, device()); }
Tensor Tensor::new_zeros(const Shape& s, DType dt) const { return zeros(s, dt, device()); }
Tensor Tensor::new_full(const Shape& s, float value, DType dt) const { return full(s, value, dt, device()); }

// The first byte of t's data, on its own device.
static char* raw_bytes(const Tensor& t) { return static_cast<char*>(t.impl()->storage->data) + t.impl()->offset * 4; }

static int64_t flat_index(const Shape& s, std::initializer_list<int64_t> idx) {
    check((int)idx.size() == s.ndim, "at: {} indices for a tensor of shape {}", idx.size(), s.str());
    int64_t flat = 0, i = 0;
    for (int64_t x : idx) {
        int64_t v = x < 0 ? x + s[i] : x;
        check(v >= 0 && v < s[i], "at: index {} out of range for dim {} of shape {}", x, i, s.str());
        flat = flat * s[i] + v;
        i++;
    }
    return flat;
}

float Tensor::item() const {
    check(numel() == 1, "item: tensor of shape {} has {} elements, not 1", shape().str(), numel());
    if (is_cuda()) return to(Device::CPU).item();
    return dtype() == DType::F32 ? data_f32()[0] : (float)data_i32()[0];
}

float Tensor::at(std::initializer_list<int64_t> idx) const {
    int64_t i = flat_index(shape(), idx);
    if (is_cuda()) {
        int32_t word;
        copy_bytes(&word, Device::CPU, raw_bytes(*this) + i * 4, Device::CUDA, 4);
        float f;
        std::memcpy(&f, &word, 4);
        return dtype() == DType::F32 ? f : (float)word;
    }
    return dtype() == DType::F32 ? data_f32()[i] : (float)data_i32()[i];
}

void Tensor::set(std::initializer_list<int64_t> idx, float v) {
    int64_t i = flat_index(shape(), idx);
    if (is_cuda()) {
        int32_t word = (int32_t)v;
        if (dtype() == DType::F32) std::memcpy(&word, &v, 4);
        copy_bytes(raw_bytes(*this) + i * 4, Device::CUDA, &word, Device::CPU, 4);
        return;
    }
    if (dtype() == DType::F32) data_f32()[i] = v;
    else data_i32()[i] = (int32_t)v;
}

std::vector<float> Tensor::to_vector() const {
    if (is_cuda()) return to(Device::CPU).to_vector();
    std::vector<float> v(numel());
    if (dtype() == DType::F32) std::memcpy(v.data(), data_f32(), v.size() * sizeof(float));
    else for (size_t i = 0; i < v.size(); i++) v[i] = (float)data_i32()[i];
    return v;
}

// ---------------------------------------------------------------------------------------------
// Views

// A new impl over the same storage; not an autograd op by itself.
static Tensor alias(const Tensor& t, const Shape& shape, int64_t extra_offset) {
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = t.impl()->storage;
    impl->offset = t.impl()->offset + extra_offset;
    impl->shape = shape;
    impl->dtype = t.impl()->dtype;
    return Tensor(impl);
}

Tensor Tensor::reshape(const Shape& want) const {
    Shape s = want;
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < s.ndim; i++) {
        if (s[i] == -1) {
            check(infer < 0, "reshape: {} -> {}: more than one -1", shape().str(), want.str());
            infer = i;
        } else {
            known *= s[i];
        }
    }
    if (infer >= 0) {
        check(known > 0 && numel() % known == 0, "reshape: cannot reshape {} into {}", shape().str(), want.str());
        s[infer] = numel() / known;
    }
    check(s.numel() == numel(), "reshape: cannot reshape {} ({} elements) into {}", shape().str(), numel(), want.str());
    Shape orig = shape();
    Tensor out = alias(*this, s, 0);
    return attach(out, "reshape", {*this}, [orig](const Tensor& g) { return std::vector<Tensor>{g.reshape(orig)}; });
}

Tensor Tensor::flatten(int start_dim, int end_dim) const {
    const Shape& s = shape();
    if (s.ndim == 0) return reshape({1});
    int a = normalize_dim(start_dim, s.ndim, "flatten"), b = normalize_dim(end_dim, s.ndim, "flatten");
    check(a <= b, "flatten: start_dim {} after end_dim {}", start_dim, end_dim);
    std::vector<int64_t> dims;
    for (int i = 0; i < a; i++) dims.push_back(s[i]);
    int64_t m = 1;
    for (int i = a; i <= b; i++) m *= s[i];
    dims.push_back(m);
    for (int i = b + 1; i < s.ndim; i++) dims.push_back(s[i]);
    return reshape(Shape(dims));
}

Tensor Tensor::narrow(int dim, int64_t start, int64_t length) const {
    const Shape& s = shape();
    int d = normalize_dim(dim, s.ndim, "narrow");
    check(start >= 0 && length >= 0 && start + length <= s[d], "narrow: [{}, {}) out of range for dim {} of {}",
          start, start + length, dim, s.str());
    if (d != 0) return slice(*this, d, start, start + length);  // not contiguous as a view: copy
    Shape out_shape = s;
    out_shape[0] = length;
    int64_t row = s.numel() / (s[0] ? s[0] : 1);
    Tensor out = alias(*this, out_shape, start * row);
    return attach(out, "narrow", {*this}, [s, start, length](const Tensor& g) {
        Tensor full = g.new_zeros(s);
        int64_t r = g.numel() / (length ? length : 1);
        copy_bytes(full.raw_f32() + start * r, g.device(), g.raw_f32(), g.device(), g.numel() * sizeof(float));
        return std::vector<Tensor>{full};
    });
}

Tensor Tensor::clone() const {
    Tensor out = empty(shape(), dtype(), device());
    copy_bytes(raw_bytes(out), device(), raw_bytes(*this), device(), numel() * 4);
    return attach(out, "clone", {*this}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor Tensor::to(Device d) const {
    if (d == device()) return *this;
    Tensor out = empty(shape(), dtype(), d);
    copy_bytes(raw_bytes(out), d, raw_bytes(*this), device(), numel() * 4);
    Device from = device();
    return attach(out, "to", {*this}, [from](const Tensor& g) { return std::vector<Tensor>{g.to(from)}; });
}

// ---------------------------------------------------------------------------------------------
// Autograd accessors

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }

Tensor& Tensor::requires_grad_(bool on) {
    check_defined(impl_.get(), "requires_grad_");
    check(!on || impl_->dtype == DType::F32, "requires_grad_: only float32 tensors can require grad (got {})",
          dtype_name(impl_->dtype));
    impl_->requires_grad = on;
    return *this;
}

Tensor Tensor::grad() const { return impl_ && impl_->grad ? Tensor(impl_->grad) : Tensor(); }
void Tensor::zero_grad() { if (impl_) impl_->grad.reset(); }

void Tensor::set_grad(const Tensor& g) {
    check(!g.defined() || g.shape() == shape(), "set_grad: gradient {} for tensor {}", g.shape().str(), shape().str());
    impl_->grad = g.defined() ? g.impl_ptr() : nullptr;
}

Tensor Tensor::detach() const { return alias(*this, shape(), 0); }

void run_backward(const Tensor& root, const Tensor& grad_output);  // autograd.cpp

void Tensor::backward() const {
    check(numel() == 1, "backward: output of shape {} is not a scalar; pass a gradient", shape().str());
    run_backward(*this, new_full(shape(), 1.f));
}

void Tensor::backward(const Tensor& grad_output) const { run_backward(*this, grad_output); }

// ---------------------------------------------------------------------------------------------
// Printing: like numpy, nested brackets, long dims elided with "...".

static void print_rec(std::string& s, const Tensor& t, int dim, int64_t base, int max_per_dim) {
    const Shape& sh = t.shape();
    if (sh.ndim == 0) { s += fmt::format("{:.4g}", t.item()); return; }
    int64_t stride = 1;
    for (int i = dim + 1; i < sh.ndim; i++) stride *= sh[i];
    s += "[";
    for (int64_t i = 0; i < sh[dim]; i++) {
        if (sh[dim] > max_per_dim && i == max_per_dim / 2) {
            s += "..., ";
            i = sh[dim] - max_per_dim / 2 - 1;
            continue;
        }
        if (dim == sh.ndim - 1) {
            int64_t k = base + i;
            s += t.dtype() == DType::F32 ? fmt::format("{:.4g}", t.data_f32()[k]) : fmt::format("{}", t.data_i32()[k]);
        } else {
            print_rec(s, t, dim + 1, base + i * stride, max_per_dim);
        }
        if (i + 1 < sh[dim]) s += dim == sh.ndim - 1 ? ", " : ",\n" + std::string(dim + 1, ' ');
    }
    s += "]";
}

std::string Tensor::str(int max_per_dim) const {
    if (!defined()) return "Tensor(undefined)";
    if (is_cuda()) {
        std::string s = to(Device::CPU).str(max_per_dim);
        return s.substr(0, s.size() - 1) + ", device=cuda)";
    }
    std::string s = "tensor(";
    print_rec(s, *this, 0, 0, max_per_dim);
    s += fmt::format(", shape={}, dtype={}{})", shape().str(), dtype_name(dtype()), requires_grad() ? ", requires_grad" : "");
    return s;
}

}  // namespace engine
