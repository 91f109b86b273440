// engine/cuda/emu/graph.cpp: the emulator's stream capture and graphs (declared in
// include/cuda_runtime.h): what a GPU does with work put on a stream that is being captured,
// modelled closely enough that a program which would fail on a GPU fails here too:
//   - nothing executes: kernels, async copies and memsets, the cuBLAS stand-ins' GEMMs and the
//     cuDNN stand-ins' convolutions and batch norms are
//     recorded in order with their arguments by value (a learning rate passed by value is frozen
//     into the graph; device memory is read when the graph runs);
//   - waiting for the stream, or a synchronous legacy call from the capturing thread, invalidates
//     the capture (the call fails, and so does cudaStreamEndCapture);
//   - cudaMallocAsync hands out graph-owned memory at an address fixed for the graph's life. The
//     allocation node makes it live and fills it with the poison pattern at each launch, so a
//     graph that reads what an earlier launch left behind reads NaNs; a free node ends its life.
//     Memory the graph allocates and does not free stays live after a launch, and launching
//     again before it is freed fails with cudaErrorInvalidValue, as cudaGraphLaunch documents;
//   - cudaFreeAsync of memory allocated outside the capture frees it when the graph runs: a second
//     launch frees it again and fails.
// One capture at a time (the engine has one stream); the capture mode is taken as thread-local:
// legacy synchronous calls from other threads are not refused.
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>
#include "internal.h"

namespace emu {
namespace {

struct Node {
    std::string what;
    std::function<void()> run;
};

std::mutex g_owned_mu;
std::unordered_set<const void*> g_owned;  // memory of graph allocation nodes

struct Recording {
    std::vector<Node> nodes;
    struct Block { void* p; size_t bytes; };
    std::vector<Block> blocks;  // made by this graph's allocation nodes

    Recording() = default;
    Recording(const Recording&) = delete;
    Recording& operator=(const Recording&) = delete;
    // A block still live when the graph goes (allocated by a launch, not freed yet) becomes an
    // ordinary allocation, which cudaFree releases; the others are released now.
    ~Recording() {
        std::lock_guard<std::mutex> lock(g_owned_mu);
        for (const Block& b : blocks) {
            g_owned.erase(b.p);
            if (!is_live_allocation(b.p)) std::free(b.p);
        }
    }
};

struct CaptureState {
    cudaStream_t stream;
    std::thread::id thread;
    std::shared_ptr<Recording> rec;
    bool invalidated = false;
};

std::mutex g_capture_mu;
std::optional<CaptureState> g_capture;

}  // namespace

Capture capture_on(cudaStream_t s) {
    std::lock_guard<std::mutex> lock(g_capture_mu);
    if (!s || !g_capture || g_capture->stream != s) return Capture::none;
    return g_capture->invalidated ? Capture::invalidated : Capture::recording;
}

void record(std::string what, std::function<void()> run) {
    std::lock_guard<std::mutex> lock(g_capture_mu);
    if (!g_capture || g_capture->invalidated) fail("record(" + what + "): no capture is recording");
    g_capture->rec->nodes.push_back(Node{std::move(what), std::move(run)});
}

cudaError_t refuse_during_capture(const char*, cudaStream_t s) {
    std::lock_guard<std::mutex> lock(g_capture_mu);
    if (!g_capture) return cudaSuccess;
    if (s ? s != g_capture->stream : std::this_thread::get_id() != g_capture->thread) return cudaSuccess;
    if (g_capture->invalidated) return set_error(cudaErrorStreamCaptureInvalidated);
    g_capture->invalidated = true;
    return set_error(cudaErrorStreamCaptureUnsupported);
}

cudaError_t on_stream(cudaStream_t s, const char* what, std::function<void()> work) {
    switch (capture_on(s)) {
        case Capture::none: work(); return cudaSuccess;
        case Capture::recording: record(what, std::move(work)); return cudaSuccess;
        case Capture::invalidated: break;
    }
    return set_error(cudaErrorStreamCaptureInvalidated);
}

bool graph_owned(const void* p) {
    std::lock_guard<std::mutex> lock(g_owned_mu);
    return g_owned.count(p) != 0;
}

void* graph_alloc(size_t bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, 256, bytes) != 0) return nullptr;
    fill_poison(p, bytes);
    {
        std::lock_guard<std::mutex> lock(g_owned_mu);
        g_owned.insert(p);
    }
    {
        std::lock_guard<std::mutex> lock(g_capture_mu);
        g_capture->rec->blocks.push_back({p, bytes});
    }
    // Live while the capture goes on, so that the captured calls' pointer checks accept it; the
    // end of the capture takes that back, and each launch's allocation node gives it again.
    add_allocation(p, bytes);
    record("graph allocation of " + std::to_string(bytes) + " bytes at " + hex(p), [p, bytes] {
        add_allocation(p, bytes);
        fill_poison(p, bytes);
    });
    return p;
}

void graph_free(void* p) {
    bool own = false;
    {
        std::lock_guard<std::mutex> lock(g_capture_mu);
        for (const Recording::Block& b : g_capture->rec->blocks) own = own || b.p == p;
    }
    if (own && !remove_allocation(p))
        fail("cudaFreeAsync(" + hex(p) + ") during capture: not the start of a live device allocation");
    record("graph free of " + hex(p), [p] {
        if (!remove_allocation(p))
            fail("a graph's free node: " + hex(p) +
                 " is not a live device allocation (memory allocated outside the graph is freed by its first launch)");
        if (!graph_owned(p)) std::free(p);
    });
}

}  // namespace emu

// ---------------------------------------------------------------------------------------------
// The runtime API.

struct CUgraph_st { std::shared_ptr<emu::Recording> rec; };
struct CUgraphExec_st { std::shared_ptr<emu::Recording> rec; };

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
    std::lock_guard<std::mutex> lock(emu::g_capture_mu);
    if (!s) return emu::set_error(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot be captured
    if (emu::g_capture) return emu::set_error(cudaErrorIllegalState);
    emu::g_capture = emu::CaptureState{s, std::this_thread::get_id(), std::make_shared<emu::Recording>()};
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
    *graph = nullptr;
    std::optional<emu::CaptureState> ended;
    {
        std::lock_guard<std::mutex> lock(emu::g_capture_mu);
        if (!emu::g_capture || emu::g_capture->stream != s) return emu::set_error(cudaErrorIllegalState);
        ended.swap(emu::g_capture);
    }
    // The graph's memory is live only from its allocation nodes on, when the graph runs.
    for (const emu::Recording::Block& b : ended->rec->blocks) emu::remove_allocation(b.p);
    if (ended->invalidated) return emu::set_error(cudaErrorStreamCaptureInvalidated);
    *graph = new CUgraph_st{ended->rec};
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
    switch (emu::capture_on(s)) {
        case emu::Capture::none: *status = cudaStreamCaptureStatusNone; break;
        case emu::Capture::recording: *status = cudaStreamCaptureStatusActive; break;
        case emu::Capture::invalidated: *status = cudaStreamCaptureStatusInvalidated; break;
    }
    return cudaSuccess;
}

// flags: none are modelled (cudaGraphInstantiateFlagAutoFreeOnLaunch would change the relaunch rule).
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
    *exec = nullptr;
    if (!graph || flags != 0) return emu::set_error(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st{graph->rec};
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    if (!exec) return emu::set_error(cudaErrorInvalidValue);
    if (emu::capture_on(s) != emu::Capture::none) return emu::set_error(cudaErrorStreamCaptureUnsupported);
    for (const emu::Recording::Block& b : exec->rec->blocks)
        if (emu::is_live_allocation(b.p)) return emu::set_error(cudaErrorInvalidValue);
    const std::vector<emu::Node>& nodes = exec->rec->nodes;
    for (size_t i = 0; i < nodes.size(); i++) {
        try {
            nodes[i].run();
        } catch (const emu::Error& e) {
            throw emu::Error(std::string(e.what()) + " (in cudaGraphLaunch, node " + std::to_string(i + 1) + " of " +
                             std::to_string(nodes.size()) + ": " + nodes[i].what + ")");
        }
    }
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { delete exec; return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t graph) { delete graph; return cudaSuccess; }

namespace emu {
size_t graph_node_count(cudaGraph_t graph) { return graph ? graph->rec->nodes.size() : 0; }
}  // namespace emu
