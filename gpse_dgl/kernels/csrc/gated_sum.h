// What the CPU gated-sum kernels share (gated_sum.cpp: by rows, with gradients; gated_sum_packed.cpp: by column
// blocks, inference; edge_gated_sum.cpp takes the sigmoid): the gate's exponential, the factorisation's range, the
// hub pieces and the checks of gates and factors. See gated_sum.cpp for the method; rows.h has the row access.
//
// Names: k, q and val are the operands Python calls dst_gate, src_gate and src_feat (gpse_dgl.nn.ops.gated_sum;
// ResGatedGraphConv's key, query and value), kept short because every loop reads them; edge_gated_sum.cpp's
// dg, sg, eg and val are its dst_gate, src_gate, edge_gate and src_feat.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "native.h"
#include "rows.h"

namespace gated {

using namespace gpse_native;  // the row access of rows.h, unqualified in the gated-sum sources

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

constexpr float kFactorLimit = 40.0f;  // e^-80 .. e^80: products of two factors stay normal floats

// Whether a row has an entry beyond kFactorLimit (a flagged row: its edges take the direct form sigmoid(k + q)).
template <typename T>
inline bool beyond_factor_range(const T* row, int64_t d) {
  float largest = 0.0f;
#pragma omp simd reduction(max : largest)
  for (int64_t j = 0; j < d; ++j) largest = std::fmax(largest, std::fabs(load(row, j)));
  return largest > kFactorLimit;
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

}  // namespace gated
