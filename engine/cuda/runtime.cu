// engine/cuda/runtime.cu: the backend's stream, device memory, copies, fills, error reporting and
// device description (the interface is engine/cuda/runtime.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>
#include "engine/cuda/kernel.h"
#include "engine/cuda/matmul.h"

namespace engine::cuda {

bool env_switch(std::atomic<int>& state, const char* name, bool by_default) {
    int on = state.load(std::memory_order_relaxed);
    if (on < 0) {
        const char* env = std::getenv(name);
        const int want = by_default ? !(env && env[0] == '0') : (env && env[0] == '1');
        state.compare_exchange_strong(on, want);
        on = state.load(std::memory_order_relaxed);
    }
    return on == 1;
}

// ---------------------------------------------------------------------------------------------
// Errors

std::string launch_config(dim3 grid, dim3 block, size_t smem) {
    return "(grid " + std::to_string(grid.x) + "x" + std::to_string(grid.y) + "x" + std::to_string(grid.z) + ", block " +
           std::to_string(block.x) + "x" + std::to_string(block.y) + "x" + std::to_string(block.z) + ", " +
           std::to_string(smem) + " B shared)";
}

void fail_cuda(const std::string& what, cudaError_t e) {
    // Reported here, so cleared: else the runtime hands it to the next launch's check as well.
    cudaGetLastError();
    std::string during = capturing() ? " (during CUDA graph capture: nothing may wait for the device, and the work "
                                       "is recorded, not run)"
                                     : "";
    fail(what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + during);
}

static const bool g_sync_each_launch = [] {
    const char* s = std::getenv("INITLAB_CUDA_SYNC");
    return s && s[0] == '1';
}();

void check_launch(const char* name, dim3 grid, dim3 block, size_t smem) {
    cudaError_t e = cudaGetLastError();
    // A capture records launches and runs none, and waiting on a capturing stream invalidates it:
    // INITLAB_CUDA_SYNC checks the replay's kernels when they run, not while they are recorded.
    if (e == cudaSuccess && g_sync_each_launch && !capturing()) e = cudaStreamSynchronize(stream());
    if (e != cudaSuccess) fail_cuda(std::string("kernel ") + name + " " + launch_config(grid, block, smem), e);
}

#ifdef ENGINE_CUDA_EMU
void emulated_launch(const char* name, const void* kernel, dim3 grid, dim3 block, size_t smem,
                     const std::function<void()>& body, const std::function<void()>& check_args) {
    try {
        emu::launch(name, kernel, grid, block, smem, body, stream(), check_args);
    } catch (const emu::Error& e) {
        fail(std::string(e.what()) + " " + launch_config(grid, block, smem));
    }
    check_launch(name, grid, block, smem);  // as on a GPU: an earlier call's unreported error surfaces here
}
#endif

// ---------------------------------------------------------------------------------------------
// The device, its stream and its memory pool (set up on first use).

namespace {
struct DeviceState {
    cudaStream_t stream = nullptr;
    size_t in_use = 0, peak = 0;
    std::mutex mu;  // guards the counters (allocations may come from loader threads)
    BadIndex* bad = nullptr;       // the device's record of a bad index (runtime.h)
    BadIndex* bad_host = nullptr;  // pinned: where each wait copies it
};

DeviceState& device() {
    static DeviceState* d = [] {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
            cudaGetLastError();
            fail("cuda: no CUDA device found (this build runs on a GPU machine; the emulated build, make emu, "
                 "runs CUDA kernels on the CPU)");
        }
        auto* s = new DeviceState;
        check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
        check_cuda(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        // Keep freed memory in the pool instead of returning it to the driver at each sync.
        cudaMemPool_t pool;
        check_cuda(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
        uint64_t threshold = UINT64_MAX;
        check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
                   "cudaMemPoolSetAttribute(release threshold)");
        // Outside the pool: allocated once, before any capture, so captured checks keep its address.
        const BadIndex clean;
        check_cuda(cudaMalloc(reinterpret_cast<void**>(&s->bad), sizeof(BadIndex)), "cudaMalloc(bad index record)");
        check_cuda(cudaMemcpy(s->bad, &clean, sizeof(BadIndex), cudaMemcpyHostToDevice), "bad index record: clear");
        check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&s->bad_host), sizeof(BadIndex), cudaHostAllocDefault),
                   "cudaHostAlloc(bad index record)");
        *s->bad_host = clean;
        return s;
    }();
    return *d;
}
}  // namespace

cudaStream_t stream() { return device().stream; }

bool emulated() {
#ifdef ENGINE_CUDA_EMU
    return true;
#else
    return false;
#endif
}

bool available() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return n > 0;
}

size_t max_shared_memory_per_block() {
    auto query = [] {
        int bytes = 0;
        check_cuda(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0),
                   "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
        return (size_t)bytes;
    };
    if (emulated()) return query();  // a test changes the emulated device's limit
    static const size_t bytes = query();
    return bytes;
}

std::string device_description() {
    if (emulated()) return "cuda: emulated";
    if (!available()) return "cuda: no device";
    cudaDeviceProp p;
    check_cuda(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
    return std::string("cuda: ") + p.name + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
           std::to_string(p.multiProcessorCount) + " SMs)";
}

// Sizes of live allocations, so free() can keep the in-use count without the caller's help.
static std::mutex g_sizes_mu;
static std::unordered_map<void*, size_t>& sizes() {
    static auto* m = new std::unordered_map<void*, size_t>;
    return *m;
}

// The capture now going on: what it allocated (graph memory) and the frees of older memory that an
// invalidated capture refused (done when it is aborted). Memory allocated in a capture that was
// aborted went with it: freeing it later asks nothing of the runtime.
namespace {
struct CaptureBook {
    bool active = false;
    std::unordered_set<void*> allocated, discarded;
    std::vector<void*> refused_frees;
};
CaptureBook g_capture;
}  // namespace

void* alloc(size_t bytes) {
    DeviceState& d = device();
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    cudaError_t e = cudaMallocAsync(&p, bytes, d.stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        fail("cuda: out of device memory allocating " + std::to_string(bytes) + " bytes (" +
             std::to_string(d.in_use >> 20) + " MiB in use by tensors, " + std::to_string(free_b >> 20) + " of " +
             std::to_string(total_b >> 20) + " MiB free): " + cudaGetErrorString(e));
    }
    g_capture.discarded.erase(p);  // the address of an aborted capture's memory, handed out anew
    if (g_capture.active) g_capture.allocated.insert(p);
    std::lock_guard<std::mutex> lock(g_sizes_mu);
    sizes()[p] = bytes;
    std::lock_guard<std::mutex> lock2(d.mu);
    d.in_use += bytes;
    if (d.in_use > d.peak) d.peak = d.in_use;
    return p;
}

void free(void* p) {
    if (!p) return;
    DeviceState& d = device();
    if (g_capture.discarded.erase(p) == 0) {
        cudaError_t e = cudaFreeAsync(p, d.stream);
        if (e == cudaErrorStreamCaptureInvalidated) {
            cudaGetLastError();
            if (g_capture.allocated.erase(p) == 0) g_capture.refused_frees.push_back(p);
        } else {
            check_cuda(e, "cudaFreeAsync");
            if (g_capture.active) g_capture.allocated.erase(p);
        }
    }
    std::lock_guard<std::mutex> lock(g_sizes_mu);
    auto it = sizes().find(p);
    if (it != sizes().end()) {
        std::lock_guard<std::mutex> lock2(d.mu);
        d.in_use -= it->second;
        sizes().erase(it);
    }
}

size_t memory_in_use() { return device().in_use; }
size_t peak_memory() { return device().peak; }
void reset_peak_memory() { DeviceState& d = device(); std::lock_guard<std::mutex> lock(d.mu); d.peak = d.in_use; }

// ---------------------------------------------------------------------------------------------
// CUDA graphs (stream capture of the one stream).

bool capturing() { return g_capture.active; }

static const uint64_t* g_rng_shift = nullptr;
void set_rng_shift(const uint64_t* device_shift) { g_rng_shift = device_shift; }
const uint64_t* rng_shift() { return g_rng_shift; }

void begin_capture() {
    if (g_capture.active) fail("cuda: begin_capture: a capture is already going on");
    // ThreadLocal: a call that would wait for the device is refused on the capturing thread; other
    // threads (data loaders) are left alone.
    check_cuda(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    g_capture.allocated.clear();
    g_capture.refused_frees.clear();
    g_capture.active = true;
}

// The end of a capture that failed: its allocations are gone with it; the frees it refused are done.
static void drop_capture() {
    for (void* p : g_capture.allocated) g_capture.discarded.insert(p);
    g_capture.allocated.clear();
    g_capture.active = false;
    std::vector<void*> refused;
    refused.swap(g_capture.refused_frees);
    for (void* p : refused) check_cuda(cudaFreeAsync(p, stream()), "cudaFreeAsync (after an aborted capture)");
}

void abort_capture() {
    if (!g_capture.active) return;
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream(), &graph);
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    drop_capture();
}

CudaGraph end_capture() {
    if (!g_capture.active) fail("cuda: end_capture without begin_capture");
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream(), &graph);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (graph) cudaGraphDestroy(graph);
        drop_capture();
        fail_cuda("cudaStreamEndCapture (a call during the capture waited for the device or failed)", e);
    }
    g_capture.active = false;
    g_capture.allocated.clear();
    CudaGraph g;
    g.graph_ = graph;
    cudaGraphExec_t exec = nullptr;
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    g.exec_ = exec;
    return g;
}

CudaGraph capture(const std::function<void()>& work) {
    begin_capture();
    try {
        work();
    } catch (...) {
        abort_capture();
        throw;
    }
    return end_capture();
}

CudaGraph::CudaGraph(CudaGraph&& other) noexcept : graph_(other.graph_), exec_(other.exec_) {
    other.graph_ = other.exec_ = nullptr;
}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
    CudaGraph old(std::move(other));  // takes other's graph; ends with ours
    std::swap(graph_, old.graph_);
    std::swap(exec_, old.exec_);
    return *this;
}

CudaGraph::~CudaGraph() {
    if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void CudaGraph::launch() const {
    if (!exec_) fail("cuda: launch of an empty CudaGraph");
    const char* what = "cudaGraphLaunch (memory the graph allocated and did not free must be freed before it runs again)";
#ifdef ENGINE_CUDA_EMU
    try {  // the emulator runs the graph now: a kernel's error comes out of the launch
        check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream()), what);
    } catch (const emu::Error& e) {
        fail(e.what());
    }
#else
    check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream()), what);
#endif
}

// ---------------------------------------------------------------------------------------------
// Profiler marks: a growing pool of events, reused from index 0 after clear_marks().

static std::vector<cudaEvent_t> g_marks;
static size_t g_marks_used = 0;

int record_mark() {
    if (g_marks_used == g_marks.size()) {
        cudaEvent_t e;
        check_cuda(cudaEventCreate(&e), "profiler: cudaEventCreate");
        g_marks.push_back(e);
    }
    check_cuda(cudaEventRecord(g_marks[g_marks_used], stream()), "profiler: cudaEventRecord");
    return (int)g_marks_used++;
}

double mark_elapsed_ms(int a, int b) {
    check_cuda(cudaEventSynchronize(g_marks.at(b)), "profiler: cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, g_marks.at(a), g_marks.at(b)), "profiler: cudaEventElapsedTime");
    return ms;
}

void clear_marks() { g_marks_used = 0; }

// The GEMM precision (engine/cuda/matmul.h); matmul.cu reads it at each GEMM. set_tf32/tf32 are
// the older bool view of it, kept for their callers.
static GemmPrecision g_gemm_precision = GemmPrecision::fp32;
void set_gemm_precision(GemmPrecision p) { g_gemm_precision = p; }
GemmPrecision gemm_precision() { return g_gemm_precision; }
const char* gemm_precision_name(GemmPrecision p) {
    switch (p) {
        case GemmPrecision::fp32: return "fp32";
        case GemmPrecision::tf32: return "tf32";
        case GemmPrecision::bf16: return "bf16";
    }
    return "?";
}
void set_tf32(bool on) { g_gemm_precision = on ? GemmPrecision::tf32 : GemmPrecision::fp32; }
bool tf32() { return g_gemm_precision == GemmPrecision::tf32; }

// ---------------------------------------------------------------------------------------------
// Copies and fills

// Host-to-device copies go through pinned staging buffers: the source is copied into one on the
// host, the device copies from there in stream order while the host goes on, and the caller may
// free or reuse its source at once. A copy straight from the caller's pageable memory had to be
// waited for (the caller may free it), and a training step's first copy then waited for the device
// to finish the step before: the device idled while the host copied and launched the next.
// kStagingSlots buffers in turn, each with an event recorded after its copy: a buffer is written
// again only after that event, so the host runs at most kStagingSlots copies ahead (a train_vit
// step makes three: images, labels, the optimizer's scalars). A copy larger than kChunkBytes goes
// in chunks, one a buffer, so no buffer grows past it: at most 128 MB pinned in all.
// INITLAB_STAGED_COPY=0 waits for every copy, as before (to time the difference on a GPU).
// Callers: the thread that runs the steps (a capture, refused below, happens on it too).
namespace {
std::atomic<int> g_staged_copy{-1};
constexpr int kStagingSlots = 8;
constexpr size_t kChunkBytes = size_t(16) << 20;

struct StagingSlot {
    void* host = nullptr;  // pinned (cudaHostAlloc)
    size_t capacity = 0;
    cudaEvent_t copied = nullptr;
    bool pending = false;  // a copy from it was issued and `copied` recorded after it
};

struct Staging {
    StagingSlot slots[kStagingSlots];
    int next = 0;
    std::mutex mu;
};

Staging& staging() {
    static Staging* s = new Staging;  // never destroyed: the driver reclaims pinned memory at exit
    return *s;
}

// The next slot, free for the host to write and at least `bytes` large. Capacities grow in powers
// of two (from 4 KB, at most kChunkBytes): pinning is slow, and a checkpoint's tensors come in
// mixed sizes.
StagingSlot& free_slot(Staging& st, size_t bytes) {
    StagingSlot& slot = st.slots[st.next];
    st.next = (st.next + 1) % kStagingSlots;
    if (!slot.copied) check_cuda(cudaEventCreate(&slot.copied), "copy to device: cudaEventCreate");
    if (slot.pending) check_cuda(cudaEventSynchronize(slot.copied), "copy to device: wait for the staging buffer");
    slot.pending = false;
    if (slot.capacity < bytes) {
        void* old = slot.host;
        slot.host = nullptr;
        slot.capacity = 0;
        if (old) check_cuda(cudaFreeHost(old), "copy to device: cudaFreeHost");
        size_t want = 4096;
        while (want < bytes) want *= 2;
        want = std::min(want, kChunkBytes);
        check_cuda(cudaHostAlloc(&slot.host, want, cudaHostAllocDefault),
                   ("copy to device: cudaHostAlloc of " + std::to_string(want) + " bytes").c_str());
        slot.capacity = want;
    }
    return slot;
}
}  // namespace

void copy_to_device(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    const std::string what = "copy to device (" + std::to_string(bytes) + " bytes)";
    if (capturing())
        fail(what + " during CUDA graph capture: the graph would read the host buffer again at each replay "
                    "(copy the inputs before the capture or replay, as nn::GraphStep does)");
    if (!env_switch(g_staged_copy, "INITLAB_STAGED_COPY", true)) {
        check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()), what.c_str());
        check_cuda(cudaStreamSynchronize(stream()), "copy to device: synchronize");
        return;
    }
    Staging& st = staging();
    std::lock_guard<std::mutex> lock(st.mu);
    for (size_t done = 0; done < bytes;) {
        const size_t n = std::min(kChunkBytes, bytes - done);
        StagingSlot& slot = free_slot(st, n);
        std::memcpy(slot.host, static_cast<const char*>(src) + done, n);
        check_cuda(cudaMemcpyAsync(static_cast<char*>(dst) + done, slot.host, n, cudaMemcpyHostToDevice, stream()),
                   what.c_str());
        if (cudaError_t e = cudaEventRecord(slot.copied, stream()); e != cudaSuccess) {
            // The copy may still read the buffer and no event says when: retire it (leaked).
            slot.host = nullptr;
            slot.capacity = 0;
            fail_cuda("copy to device: cudaEventRecord", e);
        }
        slot.pending = true;
        done += n;
    }
}

// ---------------------------------------------------------------------------------------------
// Bad indices found on the device (runtime.h): every wait brings the record along and reports it.

BadIndex* bad_index_record() { return device().bad; }

uint32_t next_index_check() {
    static std::atomic<uint32_t> last{0};
    uint32_t n = ++last;
    return n != 0 ? n : ++last;
}

static const char* index_op_name(int32_t op) {
    switch ((IndexOp)op) {
        case IndexOp::index_select: return "index_select";
        case IndexOp::gather: return "gather";
        case IndexOp::embedding: return "embedding";
        case IndexOp::cross_entropy: return "cross_entropy";
        case IndexOp::none: break;
    }
    return "an index op";
}

// Before a wait: the record's copy to the host, queued behind everything the wait waits for. Not in
// a capture (whose wait fails: the copy would become part of the graph).
static void fetch_bad_index() {
    if (capturing()) return;
    DeviceState& d = device();
    check_cuda(cudaMemcpyAsync(d.bad_host, d.bad, sizeof(BadIndex), cudaMemcpyDeviceToHost, d.stream),
               "copy of the bad index record to the host");
}

// After the wait: throws the error the CPU would have thrown at the op that met the first bad index,
// and clears the record for the ops after it.
static void report_bad_index() {
    DeviceState& d = device();
    const BadIndex bad = *d.bad_host;
    if (bad.check == 0) return;
    const BadIndex clean;
    *d.bad_host = clean;
    check_cuda(cudaMemcpy(d.bad, &clean, sizeof(BadIndex), cudaMemcpyHostToDevice), "bad index record: clear");
    const std::string position = std::to_string(bad.first >> 32), value = std::to_string((int32_t)(uint32_t)bad.first),
                      range = "[0, " + std::to_string(bad.bound) + ")";
    const std::string found = " (found on the device, reported at the first wait for the device after the op)";
    if ((IndexOp)bad.op == IndexOp::cross_entropy)
        fail("cross_entropy: target " + value + " at position " + position + " is out of range " + range +
             " (ignore_index " + std::to_string(bad.skip) + ")" + found);
    fail(std::string(index_op_name(bad.op)) + ": index " + value + " out of range " + range + " at position " +
         position + found);
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    fetch_bad_index();
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()),
               ("copy to host (" + std::to_string(bytes) + " bytes)").c_str());
    check_cuda(cudaStreamSynchronize(stream()), "copy to host: synchronize");
    report_bad_index();
}

void copy_on_device(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()),
               ("copy on device (" + std::to_string(bytes) + " bytes)").c_str());
}

void memset_zero(void* p, size_t bytes) {
    if (!bytes) return;
    check_cuda(cudaMemsetAsync(p, 0, bytes, stream()), ("memset (" + std::to_string(bytes) + " bytes)").c_str());
}

void synchronize() {
    fetch_bad_index();
    check_cuda(cudaStreamSynchronize(stream()), "synchronize");
    report_bad_index();
}

template <typename T>
__global__ void fill_kernel(T* p, T value, int64_t n) {
    GRID_STRIDE_LOOP(i, n) p[i] = value;
}

void fill_f32(float* p, float value, int64_t n) {
    if (n > 0) KERNEL_LAUNCH(fill_kernel<float>, blocks_for(n), kBlockSize, 0, p, value, n);
}

void fill_i32(int32_t* p, int32_t value, int64_t n) {
    if (n > 0) KERNEL_LAUNCH(fill_kernel<int32_t>, blocks_for(n), kBlockSize, 0, p, value, n);
}

}  // namespace engine::cuda
