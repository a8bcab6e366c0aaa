// The GPSE encoder's residual step on the CPU (gpse_dgl.kernels.residual), one pass over each row:
//
//   y   = relu(dropout(z))              (dropout: noise of gpse_dgl.kernels.dropout, drawn from seed and index)
//   out = h + y / max(||y||_2, eps)     (h may be absent: the input stage has no residual)
//
// With torch ops these are a dropout, a ReLU, a norm, a clamp, a division and an addition, each a pass over
// an (n, d) tensor forward and more backward (about a fifth of a paper-size bf16 training step). Here the
// forward reads z and h once and writes out once (and y when autograd keeps it); the backward reads y and
// the output's gradient once and writes z's gradient once. The gradient of h is the output's own.
//
// Backward, per row with n = ||y||, c = max(n, eps):
//   grad_y = grad_out / c - [n > eps] (y . grad_out) / (n c^2) y,   grad_z = grad_y * scale * [y > 0]
// (y > 0 only where the element was kept, and a kept element was multiplied by scale). A row of z with a NaN
// gives a NaN row forward and backward, as the torch ops do.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "native.h"
#include "dropout_mask.h"

namespace {

using gpse_native::DropoutMask;

// NaN is written as a bit pattern and found by its bits: the build's -ffast-math lets the compiler assume that
// no float is NaN, so float comparisons and fmax may drop one, but integer operations on the bits cannot.
constexpr uint32_t kNaNBits = 0x7fc00000u;

inline bool is_nan_bits(uint32_t bits) { return (bits & 0x7fffffffu) > 0x7f800000u; }

inline bool is_nan(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return is_nan_bits(bits);
}

inline void fill_nan(float* row, int64_t d) {
  const uint32_t* bits = &kNaNBits;
  for (int64_t j = 0; j < d; ++j) std::memcpy(row + j, bits, sizeof(float));
}

// Whether a row holds a NaN (torch's ops would carry it into the whole row through the norm).
__attribute__((noinline)) bool has_nan(const float* z, int64_t d) {
  uint32_t seen = 0;
#pragma omp simd reduction(| : seen)
  for (int64_t j = 0; j < d; ++j) {
    uint32_t bits;
    std::memcpy(&bits, z + j, sizeof(bits));
    seen |= static_cast<uint32_t>(is_nan_bits(bits));
  }
  return seen != 0;
}

// y = relu(dropout(z)) over one row whose first element has index `first` in the (n, d) layout; returns the
// row's sum of squares. Not inlined into a task's lambda, so that no captured value is reloaded per element.
__attribute__((noinline)) float dropped_relu(const float* z, DropoutMask drop, uint64_t first, float* y, int64_t d) {
  float squares = 0.0f;
  if (drop.active) {
#pragma omp simd reduction(+ : squares)
    for (int64_t j = 0; j < d; ++j) {
      const float noise = drop.keeps(first + static_cast<uint64_t>(j)) ? drop.scale : 0.0f;
      const float value = std::fmax(z[j] * noise, 0.0f);
      y[j] = value;
      squares += value * value;
    }
  } else {
#pragma omp simd reduction(+ : squares)
    for (int64_t j = 0; j < d; ++j) {
      const float value = std::fmax(z[j], 0.0f);
      y[j] = value;
      squares += value * value;
    }
  }
  return squares;
}

// out = h + y / c (h may be null); y is read in full before out is written, so out may be z's or h's row.
__attribute__((noinline)) void add_normalized(const float* h, const float* y, float c, float* out, int64_t d) {
  if (h) {
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) out[j] = h[j] + y[j] / c;
  } else {
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) out[j] = y[j] / c;
  }
}

__attribute__((noinline)) void backward_row(const float* y, const float* g, float norm, float eps, float scale,
                                            float* grad_z, int64_t d) {
  if (is_nan(norm)) {  // the forward's row was NaN: so is its gradient
    fill_nan(grad_z, d);
    return;
  }
  const float c = std::fmax(norm, eps);
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < d; ++j) dot += y[j] * g[j];
  const float along = norm > eps ? dot / (norm * c * c) : 0.0f;  // the norm's own gradient is 0 where clamped
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) grad_z[j] = y[j] > 0.0f ? (g[j] / c - along * y[j]) * scale : 0.0f;
}

// Rows per task: about 32k elements, so that a batch of molecules still splits over the threads.
int64_t grain(int64_t d) { return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(d, 1)); }

void check_float_rows(const at::Tensor& t, const char* name, int64_t n, int64_t d) {
  gpse_native::check(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 2 && t.size(0) == n &&
                         t.size(1) == d && (d <= 1 || t.stride(1) == 1) && (n <= 1 || t.stride(0) >= d),
                     "%s must be float32 (%lld, %lld) rows with unit column stride that do not overlap", name,
                     static_cast<long long>(n), static_cast<long long>(d));
}

void check_kept(const at::Tensor& y, const at::Tensor& norm, int64_t n, int64_t d) {
  TORCH_CHECK(y.is_contiguous() && norm.is_contiguous() && norm.scalar_type() == at::kFloat && norm.numel() == n,
              "y must be contiguous and norm one float32 per row");
  check_float_rows(y, "y", n, d);
}

}  // namespace

// out = h + normalize(relu(dropout(z))) row by row (h None: no residual); y and norm (both None, or both
// given) keep relu(dropout(z)) and its row norms for the backward. out may be z or h itself.
void residual_forward(at::Tensor z, c10::optional<at::Tensor> h, int64_t seed, double p, double eps,
                      c10::optional<at::Tensor> y, c10::optional<at::Tensor> norm, at::Tensor out) {
  const int64_t n = z.size(0), d = z.size(1);
  check_float_rows(z, "z", n, d);
  check_float_rows(out, "out", n, d);
  const bool residual = h.has_value(), keep = y.has_value();
  TORCH_CHECK(keep == norm.has_value(), "y and norm are given together or not at all");
  if (residual) check_float_rows(*h, "h", n, d);
  if (keep) check_kept(*y, *norm, n, d);
  const DropoutMask drop = gpse_native::dropout_mask(seed, p);
  const float* z_data = z.data_ptr<float>();
  const float* h_data = residual ? h->data_ptr<float>() : nullptr;
  float* y_data = keep ? y->data_ptr<float>() : nullptr;
  float* norm_data = keep ? norm->data_ptr<float>() : nullptr;
  float* out_data = out.data_ptr<float>();
  const int64_t zs = z.stride(0), hs = residual ? h->stride(0) : 0, os = out.stride(0);
  const float epsilon = static_cast<float>(eps);
  at::parallel_for(0, n, grain(d), [&](int64_t begin, int64_t end) {
    std::vector<float> buffer(keep ? 0 : d);
    for (int64_t i = begin; i < end; ++i) {
      float* yi = keep ? y_data + i * d : buffer.data();
      const float* zi = z_data + i * zs;
      if (has_nan(zi, d)) {  // out, y and the norm all NaN, as the torch ops give
        fill_nan(out_data + i * os, d);
        if (keep) {
          fill_nan(yi, d);
          fill_nan(norm_data + i, 1);
        }
        continue;
      }
      const float row_norm = std::sqrt(dropped_relu(zi, drop, static_cast<uint64_t>(i * d), yi, d));
      if (keep) norm_data[i] = row_norm;
      add_normalized(residual ? h_data + i * hs : nullptr, yi, std::fmax(row_norm, epsilon), out_data + i * os, d);
    }
  });
}

// grad_z (contiguous float32, z's shape) from the kept y and norm (residual_forward) and the output's gradient.
void residual_backward(at::Tensor y, at::Tensor norm, at::Tensor grad_out, double p, double eps, at::Tensor grad_z) {
  const int64_t n = y.size(0), d = y.size(1);
  check_kept(y, norm, n, d);
  TORCH_CHECK(grad_out.is_contiguous() && grad_z.is_contiguous(), "grad_out and grad_z must be contiguous");
  check_float_rows(grad_out, "grad_out", n, d);
  check_float_rows(grad_z, "grad_z", n, d);
  const float scale = gpse_native::keep_scale(gpse_native::checked_rate(p));
  const float epsilon = static_cast<float>(eps);
  const float* y_data = y.data_ptr<float>();
  const float* norm_data = norm.data_ptr<float>();
  const float* g_data = grad_out.data_ptr<float>();
  float* gz_data = grad_z.data_ptr<float>();
  at::parallel_for(0, n, grain(d), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      backward_row(y_data + i * d, g_data + i * d, norm_data[i], epsilon, scale, gz_data + i * d, d);
    }
  });
}

static const gpse_native::Binding binding([](pybind11::module_& m) {
  m.def("residual_forward", &residual_forward, "out = h + normalize(relu(dropout(z))) row by row");
  m.def("residual_backward", &residual_backward, "gradient of z through the residual step");
});
