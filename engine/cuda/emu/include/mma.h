// engine/cuda/emu/include/mma.h: the CUDA emulator's stand-in for <mma.h>, the warp matrix
// functions (nvcuda::wmma) on the tensor cores; only the subset the backend uses:
//   fragment<matrix_a | matrix_b, 16, 16, 8, precision::tf32, row_major | col_major>,
//   fragment<matrix_a | matrix_b, 16, 16, 16, __nv_bfloat16, row_major | col_major>,
//   fragment<accumulator, 16, 16, 8 | 16, float>,
//   fill_fragment, load_matrix_sync, store_matrix_sync (mem_row_major / mem_col_major), mma_sync
//   (fp32 accumulate, no satf), __float_to_tf32.
//
// As CUDA documents them, load, store and mma are warp-collective: all 32 lanes of the warp must
// call the same op with the same pointer, ldm and layout (the emulator checks, and reports a lane
// at another op, with another pointer / ldm / layout, exited or missing); the pointer must be
// 256-bit (32-byte) aligned and ldm a multiple of 4 for float (8 for a 16-bit type) elements,
// otherwise an error. An op runs once for the whole warp when the last lane arrives
// (emu::warp_collective), so it reads memory as all lanes left it.
//
// The mapping of matrix elements to the lanes' fragment elements x[i] is unspecified in CUDA; here
// it is a scramble (engine/cuda/emu/wmma.cpp: element e of lane l holds the matrix position
// (37·(32e + l) + 11) mod size in row-major order for matrix_a, other multipliers for matrix_b and
// the accumulator), so a kernel that assumes row-major, or that an accumulator's x[i] is the same
// matrix element as a matrix_a's x[i], gets wrong results. Only uniform element-wise operations
// on x[i] are portable.
//
// mma_sync computes D = A·B + C with A and B rounded as the tensor cores read them (TF32: 10
// mantissa bits, emu::to_tf32, round to nearest even; bf16 as stored), exact products, fp32 sums
// in k order. __float_to_tf32 rounds with emu::to_tf32 (the GPU's cvt.rna rounds ties away from
// zero: the two differ only on exact ties).
//
// It is a test instrument: the nvcc build includes the toolkit's <mma.h>.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

namespace emu::wmma {

enum class Use { a, b, acc };
enum class Elem { f32, tf32, bf16 };

// What one lane hands to an op: the same kind for every lane of the warp.
struct Frag {
    Use use;
    Elem elem;
    int rows, cols;
    bool col_major;  // matrix_a / matrix_b: the fragment's layout
    void* x;         // the lane's elements (float, or __nv_bfloat16 for bf16)
};
enum class Op { load, store, mma };
struct Call {
    Op op;
    Frag frag;             // load / store: the fragment; mma: d
    const void* ptr;       // load / store: memory
    unsigned ldm;
    bool mem_col_major;    // load / store
    Frag a, b, c;          // mma
};
void run(const char* kind, Call& call);  // the lane's part: waits for the warp (wmma.cpp)
float to_tf32(float x);

}  // namespace emu::wmma

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
}  // namespace precision
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
template <typename T> struct elem;
template <> struct elem<precision::tf32> {
    using storage = float;
    static constexpr ::emu::wmma::Elem kind = ::emu::wmma::Elem::tf32;
};
template <> struct elem<__nv_bfloat16> {
    using storage = __nv_bfloat16;
    static constexpr ::emu::wmma::Elem kind = ::emu::wmma::Elem::bf16;
};
template <> struct elem<float> {
    using storage = float;
    static constexpr ::emu::wmma::Elem kind = ::emu::wmma::Elem::f32;
};
template <typename U> constexpr ::emu::wmma::Use use_v = std::is_same_v<U, matrix_a>   ? ::emu::wmma::Use::a
                                                          : std::is_same_v<U, matrix_b> ? ::emu::wmma::Use::b
                                                                                        : ::emu::wmma::Use::acc;
}  // namespace detail

template <typename Use, int m, int n, int k, typename T, typename Layout = void>
class fragment {
    static_assert(m == 16 && n == 16, "the emulated wmma has the 16x16 shapes only");
    static_assert((std::is_same_v<Use, accumulator> && std::is_same_v<T, float> && std::is_void_v<Layout> &&
                   (k == 8 || k == 16)) ||
                      (!std::is_same_v<Use, accumulator> && (std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>) &&
                       ((std::is_same_v<T, precision::tf32> && k == 8) || (std::is_same_v<T, __nv_bfloat16> && k == 16))),
                  "emulated wmma fragments: tf32 m16n16k8, bf16 m16n16k16 (matrix_a/b with a layout), float accumulators");

   public:
    using element_type = T;
    using storage_element_type = typename detail::elem<T>::storage;
    static constexpr ::emu::wmma::Use kUse = detail::use_v<Use>;
    static constexpr int kRows = kUse == ::emu::wmma::Use::b ? k : m;
    static constexpr int kCols = kUse == ::emu::wmma::Use::a ? k : n;
    static constexpr int num_elements = kRows * kCols / 32;
    storage_element_type x[num_elements];

    ::emu::wmma::Frag desc() const {
        return {kUse, detail::elem<T>::kind, kRows, kCols, std::is_same_v<Layout, col_major>,
                const_cast<storage_element_type*>(x)};
    }
};

template <typename Use, int m, int n, int k, typename T, typename Layout, typename V>
inline void fill_fragment(fragment<Use, m, n, k, T, Layout>& f, const V& v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = static_cast<typename fragment<Use, m, n, k, T, Layout>::storage_element_type>(v);
}

// matrix_a / matrix_b: the layout is the fragment's.
template <typename Use, int m, int n, int k, typename T, typename Layout, typename P>
inline void load_matrix_sync(fragment<Use, m, n, k, T, Layout>& f, const P* p, unsigned ldm) {
    static_assert(!std::is_same_v<Use, accumulator>, "load_matrix_sync of an accumulator takes a layout_t");
    static_assert(std::is_same_v<P, typename fragment<Use, m, n, k, T, Layout>::storage_element_type>,
                  "load_matrix_sync: pointer of the fragment's element type (float for tf32)");
    ::emu::wmma::Call c{::emu::wmma::Op::load, f.desc(), p, ldm, false, {}, {}, {}};
    ::emu::wmma::run("wmma::load_matrix_sync", c);
}

template <int m, int n, int k>
inline void load_matrix_sync(fragment<accumulator, m, n, k, float>& f, const float* p, unsigned ldm, layout_t layout) {
    ::emu::wmma::Call c{::emu::wmma::Op::load, f.desc(), p, ldm, layout == mem_col_major, {}, {}, {}};
    ::emu::wmma::run("wmma::load_matrix_sync", c);
}

template <int m, int n, int k>
inline void store_matrix_sync(float* p, const fragment<accumulator, m, n, k, float>& f, unsigned ldm, layout_t layout) {
    ::emu::wmma::Call c{::emu::wmma::Op::store, f.desc(), p, ldm, layout == mem_col_major, {}, {}, {}};
    ::emu::wmma::run("wmma::store_matrix_sync", c);
}

template <int m, int n, int k, typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, m, n, k, float>& d, const fragment<matrix_a, m, n, k, T, LA>& a,
                     const fragment<matrix_b, m, n, k, T, LB>& b, const fragment<accumulator, m, n, k, float>& c) {
    ::emu::wmma::Call call{::emu::wmma::Op::mma, d.desc(), nullptr, 0, false, a.desc(), b.desc(), c.desc()};
    ::emu::wmma::run("wmma::mma_sync", call);
}

inline float __float_to_tf32(float x) { return ::emu::wmma::to_tf32(x); }

}  // namespace wmma
}  // namespace nvcuda
