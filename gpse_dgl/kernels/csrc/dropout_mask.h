// The dropout mask of gpse_dgl.kernels.dropout, shared by dropout.cpp and residual.cpp so that a fused residual
// step drops exactly what the dropout noise would: element i of a draw is kept when SplitMix64's output for the
// seed advanced i + 1 steps (Steele, Lea and Flood 2014) is at least p * 2^64, and a kept element is multiplied
// by 1 / (1 - p), as torch's dropout scales.
#pragma once

#include <c10/util/Exception.h>

#include <cmath>
#include <cstdint>

namespace gpse_native {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // SplitMix64's increment

inline uint64_t splitmix64(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// p itself, once checked to be a dropout rate.
inline double checked_rate(double p) {
  TORCH_CHECK(p >= 0.0 && p < 1.0, "p must be in [0, 1)");
  return p;
}

// What a kept element is multiplied by, as torch's dropout scales: noise / float(1 - p).
inline float keep_scale(double p) { return 1.0f / static_cast<float>(1.0 - p); }

// One draw of a mask: a seed and a rate. Passed by value into the loops, so that nothing in them is read through
// a pointer the loop's stores might alias.
struct DropoutMask {
  bool active;         // p > 0: otherwise every element is kept, unscaled
  uint64_t seed;
  uint64_t threshold;  // p * 2^64 (below 2^64 for p < 1)
  float scale;         // keep_scale(p)

  bool keeps(uint64_t i) const { return splitmix64(seed, i) >= threshold; }
};

inline DropoutMask dropout_mask(int64_t seed, double p) {
  checked_rate(p);
  return {p > 0.0, static_cast<uint64_t>(seed), static_cast<uint64_t>(std::ldexp(p, 64)), keep_scale(p)};
}

}  // namespace gpse_native
