// engine/profile.cpp: the op-level profiler (see engine/profile.h for what it measures and how).
#include "engine/profile.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <utility>
#include "engine/error.h"
#ifdef ENGINE_CUDA
#include "engine/cuda/runtime.h"
#endif

namespace engine::profile {

namespace detail {
std::atomic<bool> g_active{false};
}

namespace {

using Clock = std::chrono::steady_clock;

// One interval of a CUDA step, waiting for step_end() to learn its device time.
struct PendingInterval {
    size_t entry;
    int mark;  // the event recorded at the interval's end
};

struct State {
    Device device = Device::CPU;
    std::thread::id owner;
    bool in_step = false;
    int closure_depth = 0;
    Clock::time_point last, step_start;
    std::vector<Entry> entries;
    std::map<std::pair<std::string, Phase>, size_t> index;
    std::atomic<double> flops{0};  // noted since the last boundary, from any thread
    int first_mark = -1;           // CUDA: the event at step_begin()
    std::vector<PendingInterval> pending;
    int64_t steps = 0;
    double step_ms = 0;
};

State& state() {
    static State s;
    return s;
}

bool mine(const State& s) { return s.in_step && std::this_thread::get_id() == s.owner; }

size_t entry_for(State& s, const char* name, Phase phase) {
    auto key = std::make_pair(std::string(name), phase);
    auto it = s.index.find(key);
    if (it != s.index.end()) return it->second;
    s.entries.push_back(Entry{name, phase});
    s.index.emplace(key, s.entries.size() - 1);
    return s.entries.size() - 1;
}

#ifdef ENGINE_CUDA
bool on_cuda(const State& s) { return s.device == Device::CUDA; }
#endif

}  // namespace

const char* phase_name(Phase p) {
    switch (p) {
        case Phase::Forward: return "forward";
        case Phase::Backward: return "backward";
        default: return "outside ops";
    }
}

double Report::charged_ms() const {
    double t = 0;
    for (const Entry& e : entries) t += e.ms;
    return t;
}

void start(Device device) {
    State& s = state();
    check(!active(), "profile::start: the profiler is already running");
    s.device = device;
    s.owner = std::this_thread::get_id();
    s.in_step = false;
    s.closure_depth = 0;
    s.entries.clear();
    s.index.clear();
    s.pending.clear();
    s.flops = 0;
    s.steps = 0;
    s.step_ms = 0;
    detail::g_active = true;
}

Report stop() {
    State& s = state();
    check(!s.in_step, "profile::stop: a step is still open (step_end() missing)");
    detail::g_active = false;
    Report r;
    r.entries = s.entries;
    std::stable_sort(r.entries.begin(), r.entries.end(), [](const Entry& a, const Entry& b) { return a.ms > b.ms; });
    r.steps = s.steps;
    r.step_ms = s.step_ms;
    r.device = s.device;
    return r;
}

void step_begin() {
    State& s = state();
    if (!active() || std::this_thread::get_id() != s.owner) return;
    check(!s.in_step, "profile::step_begin: the previous step was not ended");
    s.in_step = true;
    s.flops = 0;
#ifdef ENGINE_CUDA
    if (on_cuda(s)) {
        cuda::synchronize();  // the step starts with an idle device: nothing earlier is charged to it
        cuda::clear_marks();
        s.pending.clear();
        s.first_mark = cuda::record_mark();
    }
#endif
    s.step_start = s.last = Clock::now();
}

void boundary(const char* name, Phase phase, double bytes) {
    if (!active()) return;
    State& s = state();
    if (!mine(s)) return;
    if (phase == Phase::Forward && s.closure_depth > 0) return;  // an op inside a backward closure
    size_t i = entry_for(s, name, phase);
    Entry& e = s.entries[i];
    e.calls++;
    e.bytes += bytes;
    e.flops += s.flops.exchange(0);
#ifdef ENGINE_CUDA
    if (on_cuda(s)) {
        s.pending.push_back({i, cuda::record_mark()});
        return;
    }
#endif
    Clock::time_point now = Clock::now();
    e.ms += std::chrono::duration<double, std::milli>(now - s.last).count();
    s.last = now;
}

void step_end() {
    State& s = state();
    if (!mine(s)) return;
    boundary("step end (sync, other)", Phase::Outside);
#ifdef ENGINE_CUDA
    if (on_cuda(s)) {
        int prev = s.first_mark;
        for (const PendingInterval& p : s.pending) {
            s.entries[p.entry].ms += cuda::mark_elapsed_ms(prev, p.mark);
            prev = p.mark;
        }
        s.pending.clear();
    }
#endif
    s.step_ms += std::chrono::duration<double, std::milli>(Clock::now() - s.step_start).count();
    s.steps++;
    s.in_step = false;
}

static std::atomic<double> g_gemm_flops_total{0};

void note_flops(double flops) {
    g_gemm_flops_total.fetch_add(flops, std::memory_order_relaxed);
    if (!active()) return;
    state().flops.fetch_add(flops, std::memory_order_relaxed);
}

double gemm_flops_total() { return g_gemm_flops_total.load(std::memory_order_relaxed); }

InBackwardClosure::InBackwardClosure() {
    if (active()) state().closure_depth++;
}
InBackwardClosure::~InBackwardClosure() {
    State& s = state();
    if (s.closure_depth > 0) s.closure_depth--;
}
bool in_backward_closure() { return state().closure_depth > 0; }

}  // namespace engine::profile
