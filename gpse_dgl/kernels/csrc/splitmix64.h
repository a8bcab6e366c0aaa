// SplitMix64 (Steele, Lea and Flood 2014): the dropout draw of element i for a seed, shared by dropout.cpp
// and residual.cpp so that a fused residual step drops exactly what gpse_dgl.kernels.dropout would.
#pragma once

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

// Element i is kept when its draw is at least p * 2^64 (below 2^64 for p < 1).
inline uint64_t keep_threshold(double p) { return static_cast<uint64_t>(std::ldexp(p, 64)); }

// What a kept element is multiplied by, as torch's dropout scales: noise / float(1 - p).
inline float keep_scale(double p) { return 1.0f / static_cast<float>(1.0 - p); }

}  // namespace gpse_native
