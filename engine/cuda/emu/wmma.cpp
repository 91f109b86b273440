// engine/cuda/emu/wmma.cpp: the WMMA stand-in's ops (include/mma.h says what they promise). Each
// lane's call parks it at a warp-collective op (emu::warp_collective); when the 32 lanes are there,
// `collective` checks that they agree and does the load, store or product for the whole warp.
#include <mma.h>

#include <cstdio>
#include <cstring>
#include "internal.h"

namespace emu::wmma {

float to_tf32(float x) { return emu::to_tf32(x); }

namespace {

const char* use_name(Use u) { return u == Use::a ? "matrix_a" : u == Use::b ? "matrix_b" : "accumulator"; }
int elem_bytes(Elem e) { return e == Elem::bf16 ? 2 : 4; }

// The matrix element (row, col) that element e of lane `lane` holds: a scramble of the row-major
// position (odd multiplier, so a bijection modulo the power-of-two size), different per use.
void position(const Frag& f, int lane, int e, int& row, int& col) {
    const int size = f.rows * f.cols;
    const int mult = f.use == Use::a ? 37 : f.use == Use::b ? 53 : 97;
    const int p = ((32 * e + lane) * mult + 11) & (size - 1);
    row = p / f.cols;
    col = p % f.cols;
}

float get(const Frag& f, int e) {
    if (f.elem == Elem::bf16) return __bfloat162float(static_cast<const __nv_bfloat16*>(f.x)[e]);
    return static_cast<const float*>(f.x)[e];
}
void set(const Frag& f, int e, float v) {
    if (f.elem == Elem::bf16) static_cast<__nv_bfloat16*>(f.x)[e] = __float2bfloat16(v);
    else static_cast<float*>(f.x)[e] = v;
}

std::string desc(const Frag& f) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s %dx%d %s%s", use_name(f.use), f.rows, f.cols,
                  f.elem == Elem::bf16 ? "bf16" : f.elem == Elem::tf32 ? "tf32" : "float",
                  f.use == Use::acc ? "" : (f.col_major ? " col_major" : " row_major"));
    return buf;
}

bool same_frag(const Frag& a, const Frag& b) {
    return a.use == b.use && a.elem == b.elem && a.rows == b.rows && a.cols == b.cols && a.col_major == b.col_major;
}

std::string collective(void* const* args) {
    const Call& c0 = *static_cast<const Call*>(args[0]);
    for (int l = 1; l < 32; l++) {
        const Call& c = *static_cast<const Call*>(args[l]);
        if (c.op != c0.op || !same_frag(c.frag, c0.frag))
            return "lanes 0 and " + std::to_string(l) + " call it with different fragments (" + desc(c0.frag) + ", " +
                   desc(c.frag) + ")";
        if (c.op == Op::mma) {
            if (!same_frag(c.a, c0.a) || !same_frag(c.b, c0.b) || !same_frag(c.c, c0.c))
                return "lanes 0 and " + std::to_string(l) + " multiply different fragment kinds";
            continue;
        }
        if (c.ptr != c0.ptr || c.ldm != c0.ldm || c.mem_col_major != c0.mem_col_major)
            return "lanes of one warp disagree (lane 0: pointer " + hex(c0.ptr) + ", ldm " + std::to_string(c0.ldm) +
                   (c0.mem_col_major ? ", col-major" : ", row-major") + "; lane " + std::to_string(l) + ": pointer " +
                   hex(c.ptr) + ", ldm " + std::to_string(c.ldm) + (c.mem_col_major ? ", col-major" : ", row-major") +
                   "): every lane must pass the same pointer, ldm and layout";
    }

    if (c0.op == Op::mma) {
        const Frag &fa = c0.a, &fb = c0.b, &fc = c0.c, &fd = c0.frag;
        const int M = fa.rows, K = fa.cols, N = fb.cols;
        if (fb.rows != K || fc.rows != M || fc.cols != N || fd.rows != M || fd.cols != N)
            return "fragment shapes do not fit (" + desc(fa) + ", " + desc(fb) + ", " + desc(fc) + ")";
        float A[16 * 16], B[16 * 16], C[16 * 16];
        for (int l = 0; l < 32; l++) {
            const Call& c = *static_cast<const Call*>(args[l]);
            int r, q;
            for (int e = 0; e < M * K / 32; e++) {
                position(fa, l, e, r, q);
                float v = get(c.a, e);
                A[r * K + q] = fa.elem == Elem::tf32 ? emu::to_tf32(v) : v;
            }
            for (int e = 0; e < K * N / 32; e++) {
                position(fb, l, e, r, q);
                float v = get(c.b, e);
                B[r * N + q] = fb.elem == Elem::tf32 ? emu::to_tf32(v) : v;
            }
            for (int e = 0; e < M * N / 32; e++) {
                position(fc, l, e, r, q);
                C[r * N + q] = get(c.c, e);
            }
        }
        // Every input gathered before any output is written: d may be c (or a lane's other fragment).
        float D[16 * 16];
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float s = C[i * N + j];
                for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];  // tf32 / bf16 products are exact in fp32
                D[i * N + j] = s;
            }
        for (int l = 0; l < 32; l++) {
            const Call& c = *static_cast<const Call*>(args[l]);
            int r, q;
            for (int e = 0; e < M * N / 32; e++) {
                position(fd, l, e, r, q);
                set(c.frag, e, D[r * N + q]);
            }
        }
        return "";
    }

    const Frag& f = c0.frag;
    const int eb = elem_bytes(f.elem);
    if (reinterpret_cast<uintptr_t>(c0.ptr) % 32 != 0)
        return "pointer " + hex(c0.ptr) + " is not 256-bit (32-byte) aligned";
    if (c0.ldm % (eb == 2 ? 8u : 4u) != 0)
        return "ldm " + std::to_string(c0.ldm) + " is not a multiple of " + (eb == 2 ? "8 (16-bit elements)" : "4 (float elements)");
    // matrix_a / matrix_b: the fragment's layout; the accumulator: the call's.
    const bool col = f.use == Use::acc ? c0.mem_col_major : f.col_major;
    const unsigned minor = col ? (unsigned)f.rows : (unsigned)f.cols;
    if (c0.ldm < minor)
        return "ldm " + std::to_string(c0.ldm) + " is less than the " + std::to_string(minor) + " elements of a " +
               (col ? "column" : "row") + " of the " + desc(f);
    for (int l = 0; l < 32; l++) {
        const Call& c = *static_cast<const Call*>(args[l]);
        int r, q;
        for (int e = 0; e < f.rows * f.cols / 32; e++) {
            position(f, l, e, r, q);
            const size_t at = col ? (size_t)q * c0.ldm + r : (size_t)r * c0.ldm + q;
            if (c0.op == Op::load) {
                if (f.elem == Elem::bf16) static_cast<__nv_bfloat16*>(c.frag.x)[e] = static_cast<const __nv_bfloat16*>(c0.ptr)[at];
                else static_cast<float*>(c.frag.x)[e] = static_cast<const float*>(c0.ptr)[at];
            } else {
                static_cast<float*>(const_cast<void*>(c0.ptr))[at] = static_cast<const float*>(c.frag.x)[e];
            }
        }
    }
    return "";
}

}  // namespace

void run(const char* kind, Call& call) { emu::warp_collective(kind, &call, collective); }

}  // namespace emu::wmma
