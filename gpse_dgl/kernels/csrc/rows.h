// What the CPU edge kernels share (gated_sum.cpp, gated_sum_packed.cpp, relu_sum.cpp, edge_gated_sum.cpp,
// u_sum.cpp): loads and stores of float32 / bfloat16 rows, row views (a column slice of a wider tensor included),
// the dtype dispatch, the task grain, prefetching of rows read at random, and the argument checks of rows, CSRs
// and gradients.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>

#include "native.h"

namespace gpse_native {

inline float load(const float* row, int64_t j) { return row[j]; }

inline float load(const at::BFloat16* row, int64_t j) {
  // bf16 -> float is a 16-bit shift; written out so that the compiler vectorises it
  uint32_t bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[j]) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline void store(float* row, int64_t j, float value) { row[j] = value; }

inline void store(at::BFloat16* row, int64_t j, float value) { row[j] = at::BFloat16(value); }  // round to nearest even

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

}  // namespace gpse_native
