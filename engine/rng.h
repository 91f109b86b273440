// engine/rng.h: the project's one random number generator, Philox4x32-10 (Salmon et al. 2011).
//
// Philox is counter-based: block c of the stream is philox(key = seed, counter = c), four 32-bit
// words, computed independently of every other block. A draw of n values advances the
// generator's offset by the number of blocks it used, and value i of the draw is a pure function
// of (seed, offset, i). A GPU kernel can therefore compute value i in thread i and produce the
// bitwise-identical stream (issue 3). Same seed -> same weights, same dropout masks.
//
// Value i of each kind of draw (offset = the generator's offset before the draw):
//   uniform:   word (i % 4) of block offset + i/4, as (w >> 8) * 2^-24 in [0, 1)
//   normal:    Box-Muller on words 2(i%2), 2(i%2)+1 of block offset + i/2
//   randint:   word (i % 4) of block offset + i/4, mapped to [low, high) by a 64-bit multiply
#pragma once
#include <cstdint>
#include <vector>

namespace engine {

struct Philox4x32 {
    static void block(uint64_t seed, uint64_t counter, uint32_t out[4]);
};

class Generator {
public:
    explicit Generator(uint64_t seed = 0) : seed_(seed) {}
    void manual_seed(uint64_t seed) { seed_ = seed; offset_ = 0; }
    uint64_t seed() const { return seed_; }
    uint64_t offset() const { return offset_; }
    // Reserve `blocks` blocks of the stream; returns the first block's counter.
    uint64_t advance(uint64_t blocks) { uint64_t o = offset_; offset_ += blocks; return o; }

    void uniform(float* out, int64_t n, float low, float high);
    void normal(float* out, int64_t n, float mean, float std);
    // Normal truncated to [a, b] (absolute bounds, as torch.nn.init.trunc_normal_), by inverse CDF.
    void trunc_normal(float* out, int64_t n, float mean, float std, float a, float b);
    void randint(int32_t* out, int64_t n, int32_t low, int32_t high);
    void bernoulli(float* out, int64_t n, float p);  // 1 with probability p, else 0
    std::vector<int32_t> permutation(int32_t n);     // Fisher-Yates
    double uniform_double();                          // one value in [0, 1), for host-side logic

private:
    uint64_t seed_;
    uint64_t offset_ = 0;
};

// The global generator used by factories, initializers and dropout; seeded from --seed.
Generator& global_generator();
void manual_seed(uint64_t seed);

// Inverse of erf on (-1, 1), to double precision (used by trunc_normal).
double erfinv(double x);

}  // namespace engine
