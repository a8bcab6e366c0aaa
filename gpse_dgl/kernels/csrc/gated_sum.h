// What the CPU gated-sum kernels share (gated_sum.cpp: by rows, with gradients; gated_sum_packed.cpp: by column
// blocks, inference): loads and stores of float32 / bfloat16 rows, the gate's exponential, the factorisation's
// range, row views, prefetching, the hub pieces and the argument checks. See gated_sum.cpp for the method.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "native.h"

namespace gated {

inline float load(const float* row, int64_t j) { return row[j]; }

inline float load(const at::BFloat16* row, int64_t j) {
  // bf16 -> float is a 16-bit shift; written out so that the compiler vectorises it
  uint32_t bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[j]) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// exp(x) = 2^n * 2^f, n = round(x log2 e), |f| <= 1/2, 2^f by Cephes' exp2f polynomial (relative error
// about 1e-7, as float32's own exp). Inline and branch-free, so that the edge loop vectorises without a
// call per vector; x is clamped where float32's exp ends.
inline float exp_approx(float x) {
  x = std::fmin(std::fmax(x, -87.0f), 88.0f);
  const float t = x * 1.44269504088896341f;
  const float n = std::nearbyint(t);
  const float f = t - n;
  float p = 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

inline float sigmoid(float z) { return 1.0f / (1.0f + exp_approx(-z)); }

inline void store(float* row, int64_t j, float value) { row[j] = value; }

inline void store(at::BFloat16* row, int64_t j, float value) { row[j] = at::BFloat16(value); }  // round to nearest even

constexpr float kFactorLimit = 40.0f;  // e^-80 .. e^80: products of two factors stay normal floats

// Whether a row has an entry beyond kFactorLimit (a flagged row: its edges take the direct form sigmoid(k + q)).
template <typename T>
inline bool beyond_factor_range(const T* row, int64_t d) {
  float largest = 0.0f;
#pragma omp simd reduction(max : largest)
  for (int64_t j = 0; j < d; ++j) largest = std::fmax(largest, std::fabs(load(row, j)));
  return largest > kFactorLimit;
}

// Rows of a 2-D tensor whose last dimension is contiguous (views of a wider projection included).
template <typename T>
struct Rows {
  const T* data;
  int64_t stride;
  const T* operator[](int64_t i) const { return data + i * stride; }
};

template <typename T>
Rows<T> rows(const at::Tensor& t) {
  return {t.data_ptr<T>(), t.stride(0)};
}

template <typename T>
struct WritableRows {
  T* data;
  int64_t stride;
  T* operator[](int64_t i) const { return data + i * stride; }
};

template <typename T>
WritableRows<T> writable_rows(const at::Tensor& t) {
  return {t.data_ptr<T>(), t.stride(0)};
}

// A destination with more in-edges than this (a virtual node has one from every node) is summed by all threads,
// in pieces of kPieceEdges edges: within a range of destinations it would keep one thread busy while the others
// wait. The pieces are fixed, so the order of the sum does not depend on the number of threads.
constexpr int64_t kHubEdges = 16384;
constexpr int64_t kPieceEdges = 4096;

// out_row[0:d] += the sum over a hub's in-edges [e0, e1): piece_sum(a, z, sum) writes the sum over the edges
// [a, z) of one piece into `sum` (d floats, zero on entry); pieces run on every thread and are added in order.
template <typename PieceSum>
inline void sum_in_pieces(int64_t e0, int64_t e1, int64_t d, float* out_row, PieceSum&& piece_sum) {
  const int64_t pieces = (e1 - e0 + kPieceEdges - 1) / kPieceEdges;
  std::vector<float> sums(pieces * d, 0.0f);
  at::parallel_for(0, pieces, 1, [&](int64_t begin, int64_t end) {
    for (int64_t piece = begin; piece < end; ++piece) {
      const int64_t a = e0 + piece * kPieceEdges;
      piece_sum(a, std::min(a + kPieceEdges, e1), sums.data() + piece * d);
    }
  });
  for (int64_t piece = 0; piece < pieces; ++piece) {
    const float* sum = sums.data() + piece * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) out_row[j] += sum[j];
  }
}

// Rows written to: float32 sums (a column slice of a wider tensor included).
struct OutRows {
  float* data;
  int64_t stride;
  float* operator[](int64_t i) const { return data + i * stride; }
};

constexpr int64_t kGrain = 32;  // destination (or source) nodes per task

// Rows are read at random (one per edge): without help each new row starts with a stall on memory,
// and the stalls, not the arithmetic or the bandwidth, set the pace. So the rows of a later edge are
// fetched while this edge's are being computed on.
constexpr int64_t kPrefetchAhead = 4;  // edges

template <typename T>
inline void prefetch_row(const T* row, int64_t d) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t offset = 0; offset < d * static_cast<int64_t>(sizeof(T)); offset += 64) {
    __builtin_prefetch(bytes + offset, 0, 3);
  }
}


inline void check_rows(const at::Tensor& t, const char* name, int64_t d) {
  gpse_native::check(t.dim() == 2 && t.size(1) == d && t.stride(1) == 1,
                     "%s must be 2-D with contiguous rows of width %lld", name, static_cast<long long>(d));
  gpse_native::check(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16,
                     "%s must be float32 or bfloat16", name);
}

inline void check_csr(const at::Tensor& indptr, const at::Tensor& index, int64_t n) {
  TORCH_CHECK(indptr.scalar_type() == at::kLong && index.scalar_type() == at::kLong, "indices must be int64");
  TORCH_CHECK(indptr.is_contiguous() && index.is_contiguous() && indptr.numel() == n + 1, "bad CSR");
}

inline void check_gates(const at::Tensor& k, const at::Tensor& q, const at::Tensor& val, int64_t d) {
  check_rows(k, "k", d);
  check_rows(q, "q", d);
  check_rows(val, "val", d);
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && q.scalar_type() == val.scalar_type(), "k, q, val: one dtype");
}

// The factors of `rows` (see `factors`): contiguous rows (a column slice of a wider tensor included, `rows` itself
// too), the rows' dtype and shape, one uint8 flag per row.
inline void check_factors(const at::Tensor& factor, const at::Tensor& flag, const at::Tensor& rows) {
  TORCH_CHECK(factor.dim() == 2 && factor.stride(1) == 1 && factor.stride(0) >= factor.size(1) &&
                  factor.scalar_type() == rows.scalar_type() && factor.sizes() == rows.sizes(),
              "factors must have contiguous rows that do not overlap, with the rows' dtype and shape");
  TORCH_CHECK(flag.is_contiguous() && flag.scalar_type() == at::kByte && flag.numel() == rows.size(0),
              "flags: one uint8 per row");
}

inline void check_float(const at::Tensor& t, const char* name) {
  gpse_native::check(t.is_contiguous() && t.scalar_type() == at::kFloat, "%s must be contiguous float32", name);
}

// A gradient the kernels write whole: contiguous, `rows` rows, the width and dtype of `like`.
inline void check_grad(const at::Tensor& t, const char* name, const at::Tensor& like, int64_t rows) {
  gpse_native::check(t.is_contiguous() && t.dim() == 2 && t.size(0) == rows && t.size(1) == like.size(1) &&
                         t.scalar_type() == like.scalar_type(),
                     "%s must be contiguous, (%lld, %lld), of the rows' dtype", name, static_cast<long long>(rows),
                     static_cast<long long>(like.size(1)));
}

// body(T{}) with T the element type of `t` (float or at::BFloat16).
template <typename F>
inline void dispatch(const at::Tensor& t, F&& body) {
  if (t.scalar_type() == at::kFloat) {
    body(float{});
  } else {
    body(at::BFloat16{});
  }
}

}  // namespace gated
