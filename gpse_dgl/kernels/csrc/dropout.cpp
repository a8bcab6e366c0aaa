// Dropout noise on the CPU (gpse_dgl.kernels.dropout):
//
//   noise[i] = 1 / (1 - p)  where  splitmix64(seed, i) >= p * 2^64,  else 0
//
// torch's CPU dropout draws its mask with Bernoulli samples from one Mersenne Twister, element by element
// on one thread: about 10 ns an element, a fifth of a paper-size bf16 training step. Here every element's
// draw is a function of (seed, element index) alone: SplitMix64's output for the seed advanced i + 1
// steps (Steele, Lea and Flood 2014; the generator of Java's SplittableRandom, which passes BigCrush).
// That is three 64-bit multiplies an element, it vectorises, threads split the elements freely, and the
// mask depends on the seed only, not on the number of threads. The caller draws the seed from torch's
// generator, so torch.manual_seed and saved generator states govern it as they govern torch's dropout.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "native.h"
#include "dropout_mask.h"

namespace {

using gpse_native::DropoutMask;

constexpr int64_t kGrain = 1 << 16;  // elements per task

// out[i] = kept ? scale : 0 over [begin, end), with `Bits` the storage of one element (float32 or bfloat16 bit
// patterns, so that the loop vectorises with no conversion in it). Not inlined into the task's lambda: there
// the stores, of scale's own type, might alias the lambda's captured copy of scale, so every iteration
// reloaded it from the calling thread's stack, a cache line that thread writes: 2 threads ran 4x slower
// than 1.
template <typename Bits>
__attribute__((noinline)) void noise_range(DropoutMask mask, Bits scale, Bits* out, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    out[i] = mask.keeps(static_cast<uint64_t>(i)) ? scale : Bits{0};
  }
}

template <typename Bits>
void noise_kernel(DropoutMask mask, Bits scale, Bits* out, int64_t n) {
  at::parallel_for(0, n, kGrain, [=](int64_t begin, int64_t end) { noise_range(mask, scale, out, begin, end); });
}

}  // namespace

void dropout_noise(int64_t seed, double p, at::Tensor out) {
  TORCH_CHECK(out.device().is_cpu() && out.is_contiguous() &&
                  (out.scalar_type() == at::kFloat || out.scalar_type() == at::kBFloat16),
              "out must be a contiguous float32 or bfloat16 CPU tensor");
  const DropoutMask mask = gpse_native::dropout_mask(seed, p);  // kept with probability 1 - p
  if (out.scalar_type() == at::kFloat) {
    uint32_t bits;
    std::memcpy(&bits, &mask.scale, sizeof(bits));
    noise_kernel<uint32_t>(mask, bits, static_cast<uint32_t*>(out.data_ptr()), out.numel());
  } else {
    const uint16_t bits = at::BFloat16(mask.scale).x;  // rounded to nearest even, as torch casts
    noise_kernel<uint16_t>(mask, bits, static_cast<uint16_t*>(out.data_ptr()), out.numel());
  }
}

static const gpse_native::Binding binding([](pybind11::module_& m) {
  m.def("dropout_noise", &dropout_noise, "dropout noise: 0 or 1 / (1 - p) per element, a function of (seed, index)");
});
