// engine/cuda/emu/emu.cpp: the CUDA emulator: kernel launches, the fiber scheduler, device
// memory and the runtime calls declared in include/cuda_runtime.h.
//
// How a launch runs. Blocks run one after another (in a seeded random order) on the calling host
// thread. The threads of a block are fibers with stacks of their own (switched by a few lines of
// asm on x86-64, by ucontext elsewhere; see "Context switches" below); each runs until it
// reaches a barrier (__syncthreads, a warp shuffle or vote) or ends, then the next one runs. The
// order in which the ready threads run between two barriers is seeded and random: a permutation of
// the block's threads, or warp by warp, so a kernel that forgets a __syncthreads() reads a
// neighbour's value before or after it is written, differently from run to run, and its parity
// test fails. A warp op completes when every lane named in its mask is there: by a coin flip as
// soon as the last one arrives (the warp then runs on at once, ahead of warps that have yet to
// run: warps drift apart on a GPU), else once nothing can run. Then:
//   - the warp ops whose lanes are all there complete (one, or several that then run interleaved);
//   - else a block barrier completes when every live thread of the block is there (exited threads
//     count as there, as on a GPU), all at the same __syncthreads() (two different ones are an
//     error: a barrier in a branch only some threads take);
//   - anything else is a deadlock (a barrier some threads never reach) and an error.
// So a warp that writes shared memory, passes only warp ops and reads it back can find it
// overwritten by a slower warp's earlier store (the race flash_tc_dq_kernel's staging tile had
// until commit 7af92fa, found by reading: every warp op then waited for every thread to stop, and
// the order could not show it).
// Asynchronous global-to-shared copies (cp.async) are kept per thread, and each lands at its issue
// or at the wait that covers it, at random (include/cuda_pipeline_primitives.h says what that
// catches).
// A thread gets a fiber stack when it first runs and gives it to the next thread when it ends, so
// a kernel without barriers runs on one warm stack. With the asm context switch every launch runs
// this way (about 20 ns per thread more than a plain call). With the ucontext switch (a system
// call per switch), a kernel whose first launch reached no barrier at all runs its later launches
// as plain calls (still in random order); if such a launch then reaches a barrier after all, that
// is reported, and INITLAB_EMU_FIBERS=1 forces fibers.
//
// Device memory is host memory from posix_memalign with exactly the size asked (so AddressSanitizer
// sees a kernel's out-of-bounds access), filled with the poison pattern, and recorded, so copies
// and frees can check that a pointer really is (or is not) device memory.
#include "cuda_pipeline_primitives.h"
#include "cuda_runtime.h"
#include "internal.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

namespace emu {

[[noreturn]] void fail(const std::string& msg) { throw Error("CUDA emulator: " + msg); }

namespace {

std::string fmt_dim(dim3 d) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "(%u,%u,%u)", d.x, d.y, d.z);
    return buf;
}

// ---------------------------------------------------------------------------------------------
// Settings and counters.

uint64_t g_seed = [] {
    const char* s = std::getenv("INITLAB_EMU_SEED");
    return s ? std::strtoull(s, nullptr, 10) : 0x5eed;
}();
const bool g_force_fibers = [] {
    const char* s = std::getenv("INITLAB_EMU_FIBERS");
    return s && s[0] == '1';
}();
std::mt19937_64 g_order_rng(g_seed);
Counters g_counters{0, 0, 0, 0};         // launches, threads, switches (under g_launch_mu); host_waits:
std::atomic<uint64_t> g_host_waits{0};  // here instead, counted from any thread (loader threads copy too)

constexpr size_t kDefaultSharedLimit = 48 << 10;  // per block, without the opt-in attribute
size_t g_optin_shared_limit = 227 << 10;           // with the opt-in: an H100's (set_optin_shared_limit)
constexpr size_t kStackBytes = EMU_ASAN ? (512 << 10) : (128 << 10);
constexpr size_t kPageBytes = 4096;

std::mutex g_launch_mu;
std::unordered_map<const void*, size_t> g_shared_optin;   // kernel -> opted-in dynamic bytes
std::unordered_map<const void*, bool> g_kernel_syncs;     // kernel -> reached a barrier in its first launch

// ---------------------------------------------------------------------------------------------
// Fibers.

enum class State { Ready, AtBlockBarrier, AtWarpOp, Done };

// An asynchronous copy (__pipeline_memcpy_async) waiting for its thread's __pipeline_wait_prior.
struct AsyncCopy {
    void* dst;
    const void* src;
    size_t copied, zeroed;
};

struct Fiber {
    ThreadState st;
    ucontext_t ctx;      // the ucontext switch's saved context
    void* sp = nullptr;  // the asm switch's saved stack pointer
    char* stack = nullptr;
    int stack_index = -1;  // -1: not started yet
    State state = State::Ready;
    int lane = 0, warp = 0;
    // The warp op this thread waits at.
    const char* warp_kind = nullptr;
    unsigned warp_mask = 0;
    uint64_t warp_value = 0, warp_result = 0;
    int warp_src = 0;
    bool warp_is_ballot = false;
    // A warp-collective op (the WMMA stand-in, include/mma.h): run once for the whole warp when
    // every lane is there, with each lane's argument (warp_value holds its pointer).
    WarpCollective warp_collective = nullptr;
    // The __syncthreads() this thread waits at.
    const char* barrier_file = nullptr;
    unsigned barrier_line = 0;
    void* asan_fake_stack = nullptr;
    // Asynchronous copies: the batch being issued, and the committed batches not yet waited for.
    std::vector<AsyncCopy> copies_open;
    std::deque<std::vector<AsyncCopy>> copies_committed;
};

struct Launch {
    const char* name;
    const void* kernel;
    dim3 grid, block;
    size_t dynamic_smem, smem_limit;
    const std::function<void()>* body;
    bool fibers;         // threads are fibers (barriers allowed)
    bool reached_sync;   // some thread reached a barrier or warp op
};

// Shared memory with the alignment a GPU gives (WMMA loads need 32 bytes), the exact size asked
// (so AddressSanitizer sees an access past its end).
struct SharedBuffer {
    unsigned char* p = nullptr;
    size_t bytes = 0;
    SharedBuffer() = default;
    SharedBuffer(const SharedBuffer&) = delete;
    SharedBuffer& operator=(const SharedBuffer&) = delete;
    ~SharedBuffer() { std::free(p); }
    void allocate(size_t n) {
        std::free(p);
        p = nullptr;
        bytes = n;
        if (n && posix_memalign(reinterpret_cast<void**>(&p), 128, n) != 0) fail("cannot allocate shared memory");
        fill_poison(p, n);
    }
    bool empty() const { return bytes == 0; }
};

struct BlockRun {
    std::vector<Fiber>* fibers = nullptr;
    Fiber* current = nullptr;  // the fiber running now (fiber mode)
    ucontext_t sched_ctx;
    void* sched_sp = nullptr;
    std::exception_ptr error;
    // Shared memory of this block: one buffer per declaration site, plus the dynamic buffer.
    std::unordered_map<const void*, SharedBuffer> shared;
    size_t static_shared_bytes = 0;
    SharedBuffer dynamic;
    const void* sched_stack_bottom = nullptr;
    size_t sched_stack_size = 0;
    void* sched_fake_stack = nullptr;
};

thread_local ThreadState* g_self = nullptr;
thread_local Launch* g_launch = nullptr;
thread_local BlockRun* g_block = nullptr;

// Fiber stacks, mapped once and kept for later launches; each has a guard page below it so an
// overflow faults. A stack serves one thread from its first switch to its end and then the next
// thread to start, so a block whose threads never wait runs on one warm stack.
std::vector<char*> g_stacks;
std::vector<char> g_stack_dirty;  // holds frames abandoned mid-kernel by a block that failed

char* stack_for(size_t i) {
    while (g_stacks.size() <= i) {
        void* p = mmap(nullptr, kStackBytes + kPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        if (p == MAP_FAILED) fail("cannot map a fiber stack");
        mprotect(p, kPageBytes, PROT_NONE);
        g_stacks.push_back(static_cast<char*>(p) + kPageBytes);
        g_stack_dirty.push_back(0);
    }
    return g_stacks[i];
}

// Context switches. Two ways, the same semantics:
//   - asm (x86-64, the default there): a dozen instructions that save the callee-saved registers,
//     the SSE and x87 control words and the stack pointer, and load the other fiber's. A fiber
//     starts on a stack prepared by hand to "return" into a trampoline that calls fiber_entry.
//   - ucontext (elsewhere, with a CET shadow stack, or with INITLAB_EMU_UCONTEXT=1):
//     getcontext/makecontext/swapcontext. swapcontext also saves and restores the signal mask, a
//     system call each time (about 150 ns here): 5 per emulated thread with one barrier, 95% of
//     the emulator's cost before the asm switch. Under ASan it is worse: ASan's swapcontext
//     interceptor clears the shadow of the whole destination stack at every switch (11 us).
// Under AddressSanitizer both tell ASan which stack is live (the fiber annotations), and the asm
// path unpoisons what a previous fiber may have left poisoned on a reused stack (prepare_fiber).
#if defined(__x86_64__)
#define EMU_ASM_SWITCH 1
extern "C" void initlab_emu_switch(void** save_sp, void* load_sp);
extern "C" void initlab_emu_trampoline();
// initlab_emu_switch(save_sp, load_sp): push rbp rbx r12-r15 and the MXCSR / x87 control words
// (8 bytes), store rsp in *save_sp, load rsp from load_sp, pop the same, return into the other
// fiber. The stack pointer saved is 16-byte aligned.
// initlab_emu_trampoline: where a new fiber's first switch returns to; calls the function in r13
// (fiber_entry, which never returns) with rsp 16-byte aligned. rip is undefined above it, so an
// unwinder stops there.
asm(R"(
    .text
    .p2align 4
    .type initlab_emu_switch, @function
initlab_emu_switch:
    .cfi_startproc
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size initlab_emu_switch, .-initlab_emu_switch

    .p2align 4
    .type initlab_emu_trampoline, @function
initlab_emu_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    callq *%r13
    ud2
    .cfi_endproc
    .size initlab_emu_trampoline, .-initlab_emu_trampoline
)");

// A stack laid out as initlab_emu_switch leaves one: control words, six registers (r13 = entry),
// then the trampoline as the return address; returns the stack pointer to load.
void* asm_context(char* stack, size_t bytes, void (*entry)()) {
    uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t(15);
    uint64_t* sp = reinterpret_cast<uint64_t*>(top - 128);
    uint32_t mxcsr;
    uint16_t fpucw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpucw));
    sp[0] = mxcsr | (uint64_t)fpucw << 32;  // what the switch loads first (the caller's settings)
    sp[1] = 0;                                                  // r15
    sp[2] = 0;                                                  // r14
    sp[3] = reinterpret_cast<uint64_t>(entry);                  // r13
    sp[4] = 0;                                                  // r12
    sp[5] = 0;                                                  // rbx
    sp[6] = 0;                                                  // rbp: the end of the frame chain
    sp[7] = reinterpret_cast<uint64_t>(&initlab_emu_trampoline);  // return address
    return sp;
}

// A CET shadow stack (Linux 6.6+ with a glibc that enables it) would refuse the asm switch's
// returns into another stack; glibc's swapcontext knows how to switch it.
bool shadow_stack_enabled() {
    FILE* f = std::fopen("/proc/self/status", "r");
    if (!f) return false;
    char line[512];
    bool on = false;
    while (std::fgets(line, sizeof line, f))
        if (std::strncmp(line, "x86_Thread_features:", 20) == 0 && std::strstr(line + 20, "shstk")) on = true;
    std::fclose(f);
    return on;
}
#else
#define EMU_ASM_SWITCH 0
#endif

bool g_use_ucontext = [] {
    const char* s = std::getenv("INITLAB_EMU_UCONTEXT");
#if EMU_ASM_SWITCH
    return (s && s[0] == '1') || shadow_stack_enabled();
#else
    (void)s;
    return true;
#endif
}();

void switch_to_fiber(BlockRun& b, Fiber& f) {
    g_counters.switches++;
    b.current = &f;
    g_self = &f.st;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&b.sched_fake_stack, f.stack, kStackBytes);
#endif
#if EMU_ASM_SWITCH
    if (!g_use_ucontext) initlab_emu_switch(&b.sched_sp, f.sp);
    else
#endif
        swapcontext(&b.sched_ctx, &f.ctx);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(b.sched_fake_stack, nullptr, nullptr);
#endif
    b.current = nullptr;
}

// `dying`: the fiber's last switch (its fake stack, under ASan, can go).
void yield_to_scheduler(BlockRun& b, Fiber& f, bool dying) {
#if EMU_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &f.asan_fake_stack, b.sched_stack_bottom, b.sched_stack_size);
#endif
#if EMU_ASM_SWITCH
    if (!g_use_ucontext) initlab_emu_switch(&f.sp, b.sched_sp);
    else
#endif
        swapcontext(&f.ctx, &b.sched_ctx);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake_stack, nullptr, nullptr);
#endif
    (void)dying;
    g_self = &f.st;
}

std::string where(const Fiber& f);  // "block (x, y, z) thread (x, y, z)", below

void fiber_entry() {
    BlockRun& b = *g_block;
    Fiber& f = *b.current;
#if EMU_ASAN
    // First arrival on this stack: learn the scheduler's stack, to switch back to it.
    __sanitizer_finish_switch_fiber(nullptr, &b.sched_stack_bottom, &b.sched_stack_size);
#endif
    try {
        (*g_launch->body)();
        size_t pending = f.copies_open.size();
        for (const auto& batch : f.copies_committed) pending += batch.size();
        if (pending)
            fail(std::string("kernel ") + g_launch->name + ": " + where(f) + " ended with " + std::to_string(pending) +
                 " asynchronous copies not waited for (__pipeline_wait_prior)");
    } catch (...) {
        if (!b.error) b.error = std::current_exception();
    }
    f.state = State::Done;
    yield_to_scheduler(b, f, true);  // never resumed
    std::abort();
}

// A fresh context for f, starting at fiber_entry on stack `index`.
void prepare_fiber(Fiber& f, int index) {
    f.stack = stack_for((size_t)index);
    f.stack_index = index;
#if EMU_ASAN
    // Shadow poison left by earlier fibers on this stack (redzones of frames that never returned:
    // the last frames of a finished fiber, or every frame of one abandoned after an error) would
    // give false reports in the new fiber's frames. (ASan's swapcontext interceptor does this for
    // the ucontext path, for the whole stack at every switch.)
    if (!g_use_ucontext) {
        size_t clean = g_stack_dirty[index] ? kStackBytes : (16 << 10);
        __asan_unpoison_memory_region(f.stack + kStackBytes - clean, clean);
    }
#endif
    g_stack_dirty[index] = 0;
#if EMU_ASM_SWITCH
    if (!g_use_ucontext) {
        f.sp = asm_context(f.stack, kStackBytes, fiber_entry);
        return;
    }
#endif
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_entry, 0);
}

std::string where(const Fiber& f) {
    return "block " + fmt_dim(dim3(f.st.block_idx.x, f.st.block_idx.y, f.st.block_idx.z)) + " thread " +
           fmt_dim(dim3(f.st.thread_idx.x, f.st.thread_idx.y, f.st.thread_idx.z));
}

std::string site(const Fiber& f) { return std::string(f.barrier_file) + ":" + std::to_string(f.barrier_line); }

// Complete the warp op that lanes of warp `w` wait at, if every lane its mask names is there:
// exchange the values (or run the collective) and make those lanes ready. `waiting` is a lane of
// the warp at the op (nullptr: the first such lane). Returns false when some lane has yet to come.
// `strict`: nothing else in the block can run, so lanes at two different ops are an error.
bool release_warp(std::vector<Fiber>& fs, const Launch& L, int w, Fiber* waiting, bool strict) {
    Fiber* lanes[32] = {};
    int first = w * 32, count = std::min<int>(32, (int)fs.size() - first);
    for (int l = 0; l < count; l++) lanes[l] = &fs[first + l];
    if (!waiting)
        for (int l = 0; l < count && !waiting; l++)
            if (lanes[l]->state == State::AtWarpOp) waiting = lanes[l];
    if (!waiting) return false;
    unsigned mask = waiting->warp_mask;
    bool all_there = true;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u)) continue;
        if (l >= count)
            fail(std::string("kernel ") + L.name + ": " + waiting->warp_kind + " at " + where(*waiting) +
                 " names lane " + std::to_string(l) + " in its mask, but the block has only " +
                 std::to_string(fs.size()) + " threads");
        Fiber& o = *lanes[l];
        if (o.state == State::Done)
            fail(std::string("kernel ") + L.name + ": " + waiting->warp_kind + " at " + where(*waiting) +
                 " names lane " + std::to_string(l) + " in its mask, but that thread has exited");
        if (o.state != State::AtWarpOp) { all_there = false; continue; }
        if (o.warp_mask != mask || std::strcmp(o.warp_kind, waiting->warp_kind) != 0) {
            // Early, another lane's op may complete first (a divergent warp: lanes 0-15 at a
            // half-warp op, 16-31 already at a whole-warp one); once nothing else can run, not.
            if (!strict) return false;
            fail(std::string("kernel ") + L.name + ": lanes of one warp wait at different warp ops (" +
                 waiting->warp_kind + " at " + where(*waiting) + ", " + o.warp_kind + " at " + where(o) + ")");
        }
    }
    if (!all_there) return false;
    if (waiting->warp_collective) {
        // Every lane named (wmma ops are whole-warp) and at the same op (checked above).
        if (mask != 0xffffffffu)
            fail(std::string("kernel ") + L.name + ": " + waiting->warp_kind + " at " + where(*waiting) +
                 " from a partial warp");
        void* args[32];
        for (int l = 0; l < 32; l++) args[l] = reinterpret_cast<void*>(lanes[l]->warp_value);
        std::string err = waiting->warp_collective(args);
        if (!err.empty())
            fail(std::string("kernel ") + L.name + ": " + waiting->warp_kind + " at " + where(*waiting) + ": " + err);
        for (int l = 0; l < 32; l++) lanes[l]->state = State::Ready;
        return true;
    }
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++)
        if ((mask >> l & 1u) && lanes[l]->warp_value) ballot |= 1u << l;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u)) continue;
        Fiber& o = *lanes[l];
        if (o.warp_is_ballot) {
            o.warp_result = ballot;
        } else {
            int src = o.warp_src - first;
            // Reading a lane outside the mask is undefined on a GPU: give it poison.
            o.warp_result = (src >= 0 && src < 32 && (mask >> src & 1u)) ? lanes[src]->warp_value
                                                                          : (uint64_t)kPoison;
        }
        o.state = State::Ready;
    }
    return true;
}

// Nothing is ready: complete the warp ops whose lanes are all there (the first such warp from a
// random one on, and each further one by a coin flip, so that the warps released together then run
// interleaved), else the block barrier; returns false when nothing could be released (a deadlock).
bool release_waiting(std::vector<Fiber>& fs, const Launch& L) {
    int nwarps = (int)((fs.size() + 31) / 32);
    const int start = (int)(g_order_rng() % (uint64_t)nwarps);
    bool released = false;
    for (int i = 0; i < nwarps; i++) {
        const int w = (start + i) % nwarps;
        if (released && (g_order_rng() & 1)) continue;
        released = release_warp(fs, L, w, nullptr, true) || released;
    }
    if (released) return true;
    // Block barrier: every live thread must be there.
    bool any_barrier = false;
    for (Fiber& f : fs) {
        if (f.state == State::AtBlockBarrier) any_barrier = true;
    }
    if (!any_barrier) return false;
    // (Threads that have exited count as arrived, as on a GPU.)
    for (Fiber& f : fs)
        if (f.state != State::Done && f.state != State::AtBlockBarrier) return false;
    // Every waiting thread must be at the same __syncthreads(): on a GPU, threads at two different
    // ones hang or pass each other's barrier, both undefined behaviour.
    const Fiber* first = nullptr;
    for (Fiber& f : fs) {
        if (f.state != State::AtBlockBarrier) continue;
        if (!first) { first = &f; continue; }
        if (f.barrier_line != first->barrier_line || std::strcmp(f.barrier_file, first->barrier_file) != 0)
            fail(std::string("kernel ") + L.name + ": deadlock: threads of one block wait at two different " +
                 "__syncthreads(): " + where(*first) + " at " + site(*first) + ", " + where(f) + " at " + site(f) +
                 " (a barrier inside a branch that not every thread takes)");
    }
    for (Fiber& f : fs)
        if (f.state == State::AtBlockBarrier) f.state = State::Ready;
    return true;
}

std::string deadlock_report(const std::vector<Fiber>& fs, const Launch& L) {
    int at_barrier = 0, at_warp = 0, done = 0;
    const Fiber *example_warp = nullptr, *example_barrier = nullptr;
    for (const Fiber& f : fs) {
        if (f.state == State::AtBlockBarrier) { at_barrier++; if (!example_barrier) example_barrier = &f; }
        if (f.state == State::AtWarpOp) { at_warp++; if (!example_warp) example_warp = &f; }
        if (f.state == State::Done) done++;
    }
    std::string s = std::string("kernel ") + L.name + ": deadlock in block " +
                    fmt_dim(dim3(fs[0].st.block_idx.x, fs[0].st.block_idx.y, fs[0].st.block_idx.z)) + ": " +
                    std::to_string(at_barrier) + " threads wait at __syncthreads(), " + std::to_string(at_warp) +
                    " at a warp op, " + std::to_string(done) + " have exited";
    if (example_barrier) s += " (e.g. __syncthreads() at " + site(*example_barrier) + " in " + where(*example_barrier) + ")";
    if (example_warp) s += std::string(" (e.g. ") + example_warp->warp_kind + " at " + where(*example_warp) + ")";
    return s + ": a barrier not every thread reaches";
}

void run_block(Launch& L, uint3 block_idx, std::vector<Fiber>& fs, std::vector<int>& order) {
    BlockRun b;
    b.fibers = &fs;
    if (L.dynamic_smem) b.dynamic.allocate(L.dynamic_smem);
    g_block = &b;
    unsigned n = L.block.x * L.block.y * L.block.z;
    for (unsigned t = 0; t < n; t++) {
        Fiber& f = fs[t];
        f.st.thread_idx = uint3{t % L.block.x, (t / L.block.x) % L.block.y, t / (L.block.x * L.block.y)};
        f.st.block_idx = block_idx;
        f.st.block_dim = L.block;
        f.st.grid_dim = L.grid;
        f.state = State::Ready;
        f.copies_open.clear();
        f.copies_committed.clear();
        f.lane = (int)(t % 32);
        f.warp = (int)(t / 32);
        f.stack_index = -1;
    }
    std::shuffle(order.begin(), order.end(), g_order_rng);
    g_counters.threads += n;

    if (!L.fibers) {
        for (int t : order) {
            g_self = &fs[t].st;
            (*L.body)();
        }
        g_block = nullptr;
        return;
    }

    // A thread gets a stack when it first runs; an ended thread's stack goes to the next one.
    std::vector<int> free_stacks;
    int next_stack = 0;
    // On an error the block stops: the stacks of threads that had not ended hold abandoned frames.
    auto abandon = [&] {
        for (Fiber& f : fs)
            if (f.stack_index >= 0 && f.state != State::Done) g_stack_dirty[f.stack_index] = 1;
        g_block = nullptr;
    };
    // A pass runs every ready thread: in a random order of the block's threads, or, by a coin flip,
    // warp by warp (the warps in a random order, the lanes of each shuffled), as warps that drift
    // apart run on a GPU. A thread that stops at a warp op its warp's last lane has just reached
    // completes it at once by a coin flip, and those lanes run next, ahead of the rest of the pass:
    // a fast warp gets past warp ops while a slow warp has yet to run, so the slow warp's earlier
    // stores can land in shared memory the fast warp has already written and reads back.
    std::deque<int> todo;
    const int nwarps = (int)((n + 31) / 32);
    std::vector<int> warp_order(nwarps);
    for (;;) {
        todo.clear();
        if (nwarps > 1 && (g_order_rng() & 1)) {
            for (int w = 0; w < nwarps; w++) warp_order[w] = w;
            std::shuffle(warp_order.begin(), warp_order.end(), g_order_rng);
            for (int w : warp_order) {
                size_t from = todo.size();
                for (int t = w * 32; t < std::min<int>((int)n, w * 32 + 32); t++) todo.push_back(t);
                std::shuffle(todo.begin() + (std::ptrdiff_t)from, todo.end(), g_order_rng);
            }
        } else {
            std::shuffle(order.begin(), order.end(), g_order_rng);
            todo.assign(order.begin(), order.end());
        }
        while (!todo.empty()) {
            Fiber& f = fs[todo.front()];
            todo.pop_front();
            if (f.state != State::Ready) continue;
            if (f.stack_index < 0) {
                int s = next_stack;
                if (!free_stacks.empty()) { s = free_stacks.back(); free_stacks.pop_back(); }
                else next_stack++;
                prepare_fiber(f, s);
            }
            switch_to_fiber(b, f);
            if (b.error) break;
            if (f.state == State::Done) free_stacks.push_back(f.stack_index);
            if (f.state != State::AtWarpOp || !(g_order_rng() & 1)) continue;
            bool released = false;
            try {
                released = release_warp(fs, L, f.warp, &f, false);
            } catch (...) {
                abandon();
                throw;
            }
            if (!released) continue;
            int lanes[32], count = 0;
            for (int t = f.warp * 32; t < std::min<int>((int)n, f.warp * 32 + 32); t++)
                if (fs[t].state == State::Ready) lanes[count++] = t;
            std::shuffle(lanes, lanes + count, g_order_rng);
            for (int i = count - 1; i >= 0; i--) todo.push_front(lanes[i]);
        }
        if (b.error) break;
        // (A pass runs every thread it makes ready: none is ready now.)
        bool all_done = true;
        for (Fiber& f : fs)
            if (f.state != State::Done) { all_done = false; break; }
        if (all_done) break;
        try {
            if (!release_waiting(fs, L)) fail(deadlock_report(fs, L));
        } catch (...) {
            abandon();
            throw;
        }
    }
    if (b.error) {
        abandon();
        std::rethrow_exception(b.error);
    }
    g_block = nullptr;
}

Fiber& current_fiber(const char* what) {
    if (!g_launch || !g_block) fail(std::string(what) + " called outside a kernel");
    if (!g_launch->fibers)
        fail(std::string("kernel ") + g_launch->name + " reached " + what +
             " although its first launch reached no barrier, so this launch runs without fibers; "
             "set INITLAB_EMU_FIBERS=1");
    g_launch->reached_sync = true;
    return *g_block->current;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Kernel-side interface.

ThreadState& self() {
    if (!g_self) fail("threadIdx/blockIdx used outside a kernel");
    return *g_self;
}

void syncthreads(const char* file, unsigned line) {
    Fiber& f = current_fiber("__syncthreads()");
    f.state = State::AtBlockBarrier;
    f.barrier_file = file;
    f.barrier_line = line;
    yield_to_scheduler(*g_block, f, false);
}

uint64_t warp_exchange(const char* kind, unsigned mask, uint64_t value, int src_lane) {
    Fiber& f = current_fiber(kind);
    if (!(mask >> f.lane & 1u))
        fail(std::string("kernel ") + g_launch->name + ": " + kind + " at " + where(f) +
             " with a mask that leaves out the calling lane");
    f.state = State::AtWarpOp;
    f.warp_kind = kind;
    f.warp_mask = mask;
    f.warp_value = value;
    f.warp_src = f.warp * 32 + src_lane;
    f.warp_is_ballot = false;
    f.warp_collective = nullptr;
    yield_to_scheduler(*g_block, f, false);
    return f.warp_result;
}

unsigned warp_ballot(const char* kind, unsigned mask, bool pred) {
    Fiber& f = current_fiber(kind);
    if (!(mask >> f.lane & 1u))
        fail(std::string("kernel ") + g_launch->name + ": " + kind + " at " + where(f) +
             " with a mask that leaves out the calling lane");
    f.state = State::AtWarpOp;
    f.warp_kind = kind;
    f.warp_mask = mask;
    f.warp_value = pred;
    f.warp_is_ballot = true;
    f.warp_collective = nullptr;
    yield_to_scheduler(*g_block, f, false);
    return (unsigned)f.warp_result;
}

void warp_collective(const char* kind, void* arg, WarpCollective run) {
    Fiber& f = current_fiber(kind);
    f.state = State::AtWarpOp;
    f.warp_kind = kind;
    f.warp_mask = 0xffffffffu;
    f.warp_value = reinterpret_cast<uint64_t>(arg);
    f.warp_is_ballot = false;
    f.warp_collective = run;
    yield_to_scheduler(*g_block, f, false);
}

// Asynchronous copies (include/cuda_pipeline_primitives.h).
namespace {
bool inside_device(const void* p, size_t bytes);  // below, with the device memory bookkeeping

void land(const AsyncCopy& c) {
    std::memcpy(c.dst, c.src, c.copied);
    std::memset(static_cast<unsigned char*>(c.dst) + c.copied, 0, c.zeroed);
}
}  // namespace

void pipeline_memcpy_async(void* dst, const void* src, size_t size, size_t zfill) {
    Fiber& f = current_fiber("__pipeline_memcpy_async");
    auto bad = [&](const std::string& why) {
        fail(std::string("kernel ") + g_launch->name + ": __pipeline_memcpy_async at " + where(f) + ": " + why);
    };
    if (size != 4 && size != 8 && size != 16) bad(std::to_string(size) + " bytes (4, 8 or 16)");
    if (zfill > size) bad("zfill " + std::to_string(zfill) + " of " + std::to_string(size) + " bytes");
    if (reinterpret_cast<uintptr_t>(dst) % size || reinterpret_cast<uintptr_t>(src) % size)
        bad("dst " + hex(dst) + " or src " + hex(src) + " not aligned to " + std::to_string(size) + " bytes");
    auto within = [&](const SharedBuffer& buf) {
        const unsigned char* p = static_cast<const unsigned char*>(dst);
        return buf.p && p >= buf.p && p + size <= buf.p + buf.bytes;
    };
    bool in_shared = within(g_block->dynamic);
    for (const auto& kv : g_block->shared) in_shared = in_shared || within(kv.second);
    if (!in_shared) bad("dst " + hex(dst) + " is not in the block's shared memory");
    if (size > zfill && !inside_device(src, size - zfill)) bad("src " + hex(src) + " is not in device memory");
    // On a GPU the copy lands at some time between now and the wait that covers it. Here at one of
    // the two ends, picked at random (seeded): landing now catches a kernel that refills a buffer
    // other warps may still read (a missing barrier before the refill), landing at the wait one
    // that reads before waiting.
    const AsyncCopy c{dst, src, size - zfill, zfill};
    if (g_order_rng() & 1)
        land(c);
    else
        f.copies_open.push_back(c);
}

void pipeline_commit() {
    Fiber& f = current_fiber("__pipeline_commit");
    f.copies_committed.push_back(std::move(f.copies_open));
    f.copies_open.clear();
}

void pipeline_wait_prior(size_t n) {
    Fiber& f = current_fiber("__pipeline_wait_prior");
    while (f.copies_committed.size() > n) {
        for (const AsyncCopy& c : f.copies_committed.front()) land(c);
        f.copies_committed.pop_front();
    }
}

void* shared_array(const void* site, size_t bytes) {
    if (!g_launch || !g_block) fail("shared memory declared outside a kernel");
    auto it = g_block->shared.find(site);
    if (it != g_block->shared.end()) {
        if (it->second.bytes != bytes) fail(std::string("kernel ") + g_launch->name + ": one shared array declared with two sizes");
        return it->second.p;
    }
    size_t total = g_block->static_shared_bytes + bytes + g_launch->dynamic_smem;
    if (total > g_launch->smem_limit)
        fail(std::string("kernel ") + g_launch->name + ": " + std::to_string(total) +
             " bytes of shared memory per block (static + dynamic), more than the " +
             std::to_string(g_launch->smem_limit) + " allowed" +
             (g_launch->smem_limit == kDefaultSharedLimit
                  ? " without cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)"
                  : ""));
    g_block->static_shared_bytes += bytes;
    SharedBuffer& buf = g_block->shared[site];
    buf.allocate(bytes);
    return buf.p;
}

void* dynamic_shared() {
    if (!g_launch || !g_block) fail("dynamic shared memory used outside a kernel");
    if (g_block->dynamic.empty())
        fail(std::string("kernel ") + g_launch->name + " uses dynamic shared memory but was launched with 0 bytes of it");
    return g_block->dynamic.p;
}

void fill_poison(void* p, size_t bytes) {
    unsigned char* c = static_cast<unsigned char*>(p);
    uint32_t w = kPoison;
    for (size_t i = 0; i < bytes; i++) c[i] = reinterpret_cast<unsigned char*>(&w)[i % 4];
}

void set_seed(uint64_t seed) { g_order_rng.seed(seed); }
size_t set_optin_shared_limit(size_t bytes) {
    if (bytes < kDefaultSharedLimit)
        fail("set_optin_shared_limit: " + std::to_string(bytes) + " bytes, under the 48 KiB default");
    return std::exchange(g_optin_shared_limit, bytes);
}
Counters counters() {
    Counters c = g_counters;
    c.host_waits = g_host_waits.load();
    return c;
}

namespace {
std::FILE* g_trace = [] {
    const char* path = std::getenv("INITLAB_EMU_TRACE");
    if (!path || !*path) return (std::FILE*)nullptr;
    std::FILE* f = std::fopen(path, "w");
    if (!f) std::fprintf(stderr, "CUDA emulator: cannot write the trace INITLAB_EMU_TRACE=%s\n", path);
    return f;
}();
std::mutex g_trace_mu;
}  // namespace

bool tracing() { return g_trace != nullptr; }
void trace(const std::string& line) {
    if (!g_trace) return;
    std::lock_guard<std::mutex> lock(g_trace_mu);
    std::fputs(line.c_str(), g_trace);
    std::fputc('\n', g_trace);
}

const char* context_switch() { return g_use_ucontext ? "ucontext" : "asm"; }
const char* set_ucontext(bool on) {
    if (g_launch) fail("set_ucontext called during a launch");
    g_use_ucontext = on || !EMU_ASM_SWITCH;
    return context_switch();
}

// ---------------------------------------------------------------------------------------------
// Launch: check the configuration as a GPU would, then run the blocks.

void launch(const char* name, const void* kernel, dim3 grid, dim3 block, size_t dynamic_smem,
            const std::function<void()>& body, cudaStream_t stream, const std::function<void()>& check_args) {
    if (g_launch) fail(std::string("kernel ") + name + " launched from inside kernel " + g_launch->name);
    // One launch at a time (the stacks, the order generator and the caches are shared).
    std::lock_guard<std::mutex> lock(g_launch_mu);
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    std::string k = std::string("kernel ") + name + ": ";
    if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0)
        fail(k + "empty launch, grid " + fmt_dim(grid) + " block " + fmt_dim(block) +
             " (a GPU rejects it as an invalid configuration)");
    if (threads > 1024) fail(k + "block " + fmt_dim(block) + " has " + std::to_string(threads) + " threads, more than 1024");
    if (block.x > 1024 || block.y > 1024 || block.z > 64) fail(k + "block " + fmt_dim(block) + " exceeds (1024,1024,64)");
    if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
        fail(k + "grid " + fmt_dim(grid) + " exceeds (2^31-1,65535,65535)");
    size_t limit = kDefaultSharedLimit;
    auto opt = g_shared_optin.find(kernel);
    if (opt != g_shared_optin.end()) limit = std::max(limit, std::min(opt->second, g_optin_shared_limit));
    if (dynamic_smem > limit)
        fail(k + std::to_string(dynamic_smem) + " bytes of dynamic shared memory, more than the " +
             std::to_string(limit) + " allowed" +
             (opt == g_shared_optin.end()
                  ? " without cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)"
                  : ""));

    if (check_args) check_args();
    // On a captured stream the launch is recorded; the graph launches it again on no stream.
    switch (capture_on(stream)) {
        case Capture::none: break;
        case Capture::recording:
            record(std::string("kernel ") + name, [=, body = body, check_args = check_args] {
                launch(name, kernel, grid, block, dynamic_smem, body, nullptr, check_args);
            });
            return;
        case Capture::invalidated: set_error(cudaErrorStreamCaptureInvalidated); return;
    }

    auto known = g_kernel_syncs.find(kernel);
    Launch L{name, kernel, grid, block, dynamic_smem, limit, &body,
             g_force_fibers || !g_use_ucontext || known == g_kernel_syncs.end() || known->second, false};
    g_counters.launches++;
    if (g_trace)
        trace(std::string("kernel ") + name + " grid=" + fmt_dim(grid) + " block=" + fmt_dim(block) +
              " shared=" + std::to_string(dynamic_smem));
    std::vector<Fiber> fibers(threads);
    std::vector<int> order(threads);
    for (uint64_t i = 0; i < threads; i++) order[i] = (int)i;
    // Blocks in a random order too: no kernel may depend on block order.
    uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    std::vector<uint64_t> blocks;
    bool shuffle_blocks = nblocks <= (1u << 20);
    if (shuffle_blocks) {
        blocks.resize(nblocks);
        for (uint64_t i = 0; i < nblocks; i++) blocks[i] = i;
        std::shuffle(blocks.begin(), blocks.end(), g_order_rng);
    }
    g_launch = &L;
    try {
        for (uint64_t i = 0; i < nblocks; i++) {
            uint64_t bl = shuffle_blocks ? blocks[i] : i;
            uint3 idx{(unsigned)(bl % grid.x), (unsigned)((bl / grid.x) % grid.y), (unsigned)(bl / ((uint64_t)grid.x * grid.y))};
            run_block(L, idx, fibers, order);
        }
    } catch (...) {
        g_launch = nullptr;
        g_self = nullptr;
        g_block = nullptr;
        throw;
    }
    g_launch = nullptr;
    g_self = nullptr;
    if (known == g_kernel_syncs.end()) g_kernel_syncs[kernel] = L.reached_sync;
}

// ---------------------------------------------------------------------------------------------
// Device memory bookkeeping.

namespace {
// Allocations may come from loader threads while the main thread launches and copies.
std::mutex g_allocs_mu;
std::map<uintptr_t, size_t> g_allocs;  // start -> bytes
size_t g_live_bytes = 0;
thread_local cudaError_t g_last_error = cudaSuccess;

// The allocation containing [p, p + bytes), or end() (g_allocs_mu held).
std::map<uintptr_t, size_t>::iterator find_alloc(const void* p, size_t bytes) {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return g_allocs.end();
    --it;
    if (a >= it->first && a + bytes <= it->first + std::max<size_t>(it->second, 1)) return it;
    return g_allocs.end();
}

// [p, p + bytes) lies inside one live device allocation.
bool inside_device(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(g_allocs_mu);
    return find_alloc(p, bytes) != g_allocs.end();
}

}  // namespace

std::string hex(const void* p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", p);
    return buf;
}

cudaError_t set_error(cudaError_t e) { return g_last_error = e; }

void add_allocation(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(g_allocs_mu);
    g_allocs[reinterpret_cast<uintptr_t>(p)] = bytes;
    g_live_bytes += bytes;
}

bool remove_allocation(void* p) {
    std::lock_guard<std::mutex> lock(g_allocs_mu);
    auto it = g_allocs.find(reinterpret_cast<uintptr_t>(p));
    if (it == g_allocs.end()) return false;
    g_live_bytes -= it->second;
    g_allocs.erase(it);
    return true;
}

bool is_live_allocation(const void* p) {
    std::lock_guard<std::mutex> lock(g_allocs_mu);
    return g_allocs.count(reinterpret_cast<uintptr_t>(p)) != 0;
}

void check_copy(const char* call, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0) return;
    bool dst_dev = inside_device(dst, bytes), src_dev = inside_device(src, bytes);
    bool want_dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool want_src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    const char* names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice", "Default"};
    std::string c = std::string(call) + "(" + names[kind] + ", " + std::to_string(bytes) + " bytes): ";
    if (kind == cudaMemcpyDefault) return;
    if (kind == cudaMemcpyHostToHost) {
        if (dst_dev || src_dev) fail(c + "a device pointer in a host-to-host copy");
        return;
    }
    if (want_dst_dev && !dst_dev) fail(c + "destination " + hex(dst) + " is not (all) inside device memory");
    if (!want_dst_dev && inside_device(dst, 1)) fail(c + "destination " + hex(dst) + " is device memory");
    if (want_src_dev && !src_dev) fail(c + "source " + hex(src) + " is not (all) inside device memory");
    if (!want_src_dev && inside_device(src, 1)) fail(c + "source " + hex(src) + " is device memory");
}

bool is_device_pointer(const void* p) { return inside_device(p, 1); }
size_t live_device_bytes() {
    std::lock_guard<std::mutex> lock(g_allocs_mu);
    return g_live_bytes;
}

void check_kernel_pointer(const char* kernel, int index, const void* p) {
    if (!p) return;
    {
        std::lock_guard<std::mutex> lock(g_allocs_mu);
        if (find_alloc(p, 1) != g_allocs.end()) return;
        // One past the end of an allocation (an empty view at its end) is a pointer, not an access.
        uintptr_t a = reinterpret_cast<uintptr_t>(p);
        auto it = g_allocs.lower_bound(a);
        if (it != g_allocs.begin() && std::prev(it)->first + std::prev(it)->second == a) return;
    }
    fail("kernel " + std::string(kernel) + ": argument " + std::to_string(index) + " is the pointer " + hex(p) +
         ", not device memory (a kernel reading host memory faults with an illegal address on a GPU)");
}

}  // namespace emu

// ---------------------------------------------------------------------------------------------
// The runtime API.

using emu::g_allocs;

const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidDevicePointer: return "invalid device pointer";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        case cudaErrorIllegalState: return "the operation is not permitted in the current state";
        case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
        case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
        case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    }
    return "unknown error";
}
const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
        case cudaErrorIllegalState: return "cudaErrorIllegalState";
        case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
        case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
        case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    }
    return "cudaErrorUnknown";
}
cudaError_t cudaGetLastError() { cudaError_t e = emu::g_last_error; emu::g_last_error = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError() { return emu::g_last_error; }

cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : (emu::g_last_error = cudaErrorInvalidDevice); }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device != 0) return emu::g_last_error = cudaErrorInvalidDevice;
    std::memset(prop, 0, sizeof *prop);
    std::snprintf(prop->name, sizeof prop->name, "CUDA emulator (CPU)");
    prop->totalGlobalMem = size_t(16) << 30;
    prop->sharedMemPerBlock = emu::kDefaultSharedLimit;
    prop->sharedMemPerBlockOptin = emu::g_optin_shared_limit;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024; prop->maxThreadsDim[1] = 1024; prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647; prop->maxGridSize[1] = 65535; prop->maxGridSize[2] = 65535;
    prop->multiProcessorCount = 132;
    prop->major = 9;
    prop->minor = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (device != 0) return emu::g_last_error = cudaErrorInvalidDevice;
    if (attr != cudaDevAttrMaxSharedMemoryPerBlockOptin) return emu::g_last_error = cudaErrorInvalidValue;
    *value = (int)emu::g_optin_shared_limit;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
    if (cudaError_t e = emu::refuse_during_capture("cudaDeviceSynchronize", nullptr)) return e;
    emu::g_host_waits++;
    emu::settle_copies(UINT64_MAX, "cudaDeviceSynchronize");
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    *total_bytes = size_t(16) << 30;
    size_t live = emu::live_device_bytes();
    *free_bytes = *total_bytes > live ? *total_bytes - live : 0;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || (size_t)value > emu::g_optin_shared_limit)
        return emu::g_last_error = cudaErrorInvalidValue;
    emu::g_shared_optin[kernel] = (size_t)value;
    return cudaSuccess;
}

namespace {
cudaError_t allocate(void** p, size_t bytes) {
    *p = nullptr;
    if (bytes == 0) return cudaSuccess;
    if (posix_memalign(p, 256, bytes) != 0) { *p = nullptr; return emu::set_error(cudaErrorMemoryAllocation); }
    emu::fill_poison(*p, bytes);
    emu::add_allocation(*p, bytes);
    return cudaSuccess;
}

// Graph-owned memory stays with its graph when its life as an allocation ends.
cudaError_t release(const char* call, void* p) {
    if (!p) return cudaSuccess;
    if (!emu::remove_allocation(p)) emu::fail(std::string(call) + "(" + emu::hex(p) + "): not the start of a live device allocation");
    if (!emu::graph_owned(p)) std::free(p);
    return cudaSuccess;
}
}  // namespace

cudaError_t cudaMalloc(void** p, size_t bytes) {
    *p = nullptr;
    if (cudaError_t e = emu::refuse_during_capture("cudaMalloc", nullptr)) return e;
    return allocate(p, bytes);
}

cudaError_t cudaFree(void* p) {
    if (cudaError_t e = emu::refuse_during_capture("cudaFree", nullptr)) return e;
    return release("cudaFree", p);
}

cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s) {
    *p = nullptr;
    switch (emu::capture_on(s)) {
        case emu::Capture::none: return allocate(p, bytes);
        case emu::Capture::invalidated: return emu::set_error(cudaErrorStreamCaptureInvalidated);
        case emu::Capture::recording: break;
    }
    if (bytes == 0) return cudaSuccess;
    *p = emu::graph_alloc(bytes);
    return *p ? cudaSuccess : emu::set_error(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
    switch (emu::capture_on(s)) {
        case emu::Capture::none: return release("cudaFreeAsync", p);
        case emu::Capture::invalidated: return emu::set_error(cudaErrorStreamCaptureInvalidated);
        case emu::Capture::recording: break;
    }
    if (p) emu::graph_free(p);
    return cudaSuccess;
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
    static int the_pool;
    *pool = reinterpret_cast<cudaMemPool_t>(&the_pool);
    return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (cudaError_t e = emu::refuse_during_capture("cudaMemcpy", nullptr)) return e;
    emu::g_host_waits++;
    emu::check_copy("cudaMemcpy", dst, src, bytes, kind);
    if (bytes) std::memmove(dst, src, bytes);
    return cudaSuccess;
}
// Captured copies read their source when the graph runs (host memory included), and are checked
// again then: the memory may have been freed since.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    emu::check_copy("cudaMemcpyAsync", dst, src, bytes, kind);
    auto copy = [=] {
        emu::check_copy("cudaMemcpyAsync", dst, src, bytes, kind);
        if (bytes) std::memmove(dst, src, bytes);
    };
    switch (emu::capture_on(s)) {
        case emu::Capture::none:
            copy();
            if (kind == cudaMemcpyHostToDevice) emu::note_copy_from_host(src, bytes);
            return cudaSuccess;
        case emu::Capture::invalidated: return emu::set_error(cudaErrorStreamCaptureInvalidated);
        case emu::Capture::recording: emu::record("cudaMemcpyAsync of " + std::to_string(bytes) + " bytes", copy); return cudaSuccess;
    }
    return cudaSuccess;
}
namespace {
void set_bytes(void* p, int value, size_t bytes) {
    if (bytes && !emu::inside_device(p, bytes))
        emu::fail("cudaMemset(" + emu::hex(p) + ", " + std::to_string(bytes) + " bytes): not (all) inside device memory");
    if (bytes) std::memset(p, value, bytes);
}
}  // namespace
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
    if (cudaError_t e = emu::refuse_during_capture("cudaMemset", nullptr)) return e;
    set_bytes(p, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
    if (bytes && !emu::inside_device(p, bytes))
        emu::fail("cudaMemsetAsync(" + emu::hex(p) + ", " + std::to_string(bytes) + " bytes): not (all) inside device memory");
    switch (emu::capture_on(s)) {
        case emu::Capture::none: set_bytes(p, value, bytes); return cudaSuccess;
        case emu::Capture::invalidated: return emu::set_error(cudaErrorStreamCaptureInvalidated);
        case emu::Capture::recording:
            emu::record("cudaMemsetAsync of " + std::to_string(bytes) + " bytes", [=] { set_bytes(p, value, bytes); });
            return cudaSuccess;
    }
    return cudaSuccess;
}

// Pinned host memory (cudaHostAlloc). A GPU copies from it by DMA after cudaMemcpyAsync has
// returned, so the host may write it again only once it knows the copy done: after
// cudaStreamSynchronize, cudaDeviceSynchronize, cudaFreeHost (which waits) or cudaEventSynchronize
// on an event recorded after the copy. The emulator copies at once and keeps what it sent; at each
// of those waits it checks that the buffer still holds it, else the host wrote it while a GPU may
// still have been reading it: an error naming the buffer. (A pageable source is not checked: the
// engine waits for such copies, engine/cuda/runtime.cu.)
namespace emu {
namespace {
struct SentCopy {
    const uint8_t* src;
    std::vector<uint8_t> sent;
    uint64_t order;  // in stream order, with the events' records
};
std::mutex g_pinned_mu;
std::map<uintptr_t, size_t> g_pinned;  // start -> bytes
std::deque<SentCopy> g_unsettled;      // copies from pinned memory not yet known done
uint64_t g_stream_order = 0;

bool inside_pinned(const void* p, size_t bytes) {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = g_pinned.upper_bound(a);
    if (it == g_pinned.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
}

}  // namespace

// The copies issued before stream position `until` are done: check them, forget them.
void settle_copies(uint64_t until, const char* wait) {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    while (!g_unsettled.empty() && g_unsettled.front().order < until) {
        SentCopy c = std::move(g_unsettled.front());
        g_unsettled.pop_front();
        if (std::memcmp(c.src, c.sent.data(), c.sent.size()) != 0)
            fail("pinned host memory " + hex(c.src) + " (" + std::to_string(c.sent.size()) +
                 " bytes, the source of a cudaMemcpyAsync) was written before " + wait +
                 " said the copy was done: a GPU may have copied the new bytes (wait for an event recorded after "
                 "the copy before reusing the buffer)");
    }
}

void note_copy_from_host(const void* src, size_t bytes) {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    if (!bytes || !inside_pinned(src, bytes)) return;
    const uint8_t* p = static_cast<const uint8_t*>(src);
    g_unsettled.push_back({p, std::vector<uint8_t>(p, p + bytes), g_stream_order++});
}
uint64_t stream_position() {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    return g_stream_order++;
}
}  // namespace emu

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
    *p = nullptr;
    if (cudaError_t e = emu::refuse_during_capture("cudaHostAlloc", nullptr)) return e;
    if (bytes == 0) return cudaSuccess;
    if (posix_memalign(p, 4096, bytes) != 0) { *p = nullptr; return emu::set_error(cudaErrorMemoryAllocation); }
    emu::fill_poison(*p, bytes);
    std::lock_guard<std::mutex> lock(emu::g_pinned_mu);
    emu::g_pinned[reinterpret_cast<uintptr_t>(*p)] = bytes;
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, cudaHostAllocDefault); }
cudaError_t cudaFreeHost(void* p) {
    if (cudaError_t e = emu::refuse_during_capture("cudaFreeHost", nullptr)) return e;
    if (!p) return cudaSuccess;
    emu::settle_copies(UINT64_MAX, "cudaFreeHost");
    {
        std::lock_guard<std::mutex> lock(emu::g_pinned_mu);
        if (emu::g_pinned.erase(reinterpret_cast<uintptr_t>(p)) == 0)
            emu::fail("cudaFreeHost(" + emu::hex(p) + "): not the start of live pinned host memory");
    }
    std::free(p);
    return cudaSuccess;
}

// Streams and events: everything runs synchronously, so a stream is a name and an event a time
// (and a position in the stream, for the pinned copies above).
struct CUstream_st { int unused; };
struct CUevent_st { std::chrono::steady_clock::time_point t; bool recorded = false; uint64_t position = 0; };

cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = new CUstream_st{0}; return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (cudaError_t e = emu::refuse_during_capture("cudaStreamSynchronize", s)) return e;
    emu::g_host_waits++;
    emu::settle_copies(UINT64_MAX, "cudaStreamSynchronize");
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new CUevent_st; return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    auto stamp = [e] {
        e->t = std::chrono::steady_clock::now();
        e->recorded = true;
        e->position = emu::stream_position();
    };
    switch (emu::capture_on(s)) {
        case emu::Capture::none: stamp(); return cudaSuccess;
        case emu::Capture::invalidated: return emu::set_error(cudaErrorStreamCaptureInvalidated);
        case emu::Capture::recording: emu::record("cudaEventRecord", stamp); return cudaSuccess;
    }
    return cudaSuccess;
}
// (Any event: the emulator does not track which stream recorded it.)
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (cudaError_t err = emu::refuse_during_capture("cudaEventSynchronize", nullptr)) return err;
    if (!e) return emu::set_error(cudaErrorInvalidValue);
    if (e->recorded) emu::settle_copies(e->position, "cudaEventSynchronize");
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a->recorded || !b->recorded) return emu::g_last_error = cudaErrorInvalidValue;
    *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
    return cudaSuccess;
}
