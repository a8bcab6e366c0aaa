// What the neighbour-sum kernels share: a node's sum started at its self term (relu_sum.cpp, u_sum.cpp), and a
// node's gradient as the sum of float32 rows over its edges in a CSR plus its self term (u_sum.cpp).
#pragma once

#include <algorithm>
#include <vector>

#include "rows.h"

namespace node_sums {

// acc[0:d] = w row[0:d] (zeros where w == 0, row unread: it may not exist), in float32.
template <typename T>
inline void start_with_self_term(float* acc, const T* row, float self_weight, int64_t d) {
  if (self_weight == 0.0f) {
    std::fill(acc, acc + d, 0.0f);
    return;
  }
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) acc[j] = self_weight * gpse_native::load(row, j);
}

// out[u] (T, every row written) = w self_rows[u] (u < n_self, where w != 0) + the sum of rows[index[e]] over u's
// edges [indptr[u], indptr[u + 1]), in float32 and in edge order on one thread (the same on any thread count).
template <typename T>
void sum_by_node(const int64_t* indptr, const int64_t* index, const float* rows, const float* self_rows,
                 float self_weight, int64_t n_self, T* out, int64_t n, int64_t d) {
  at::parallel_for(0, n, gpse_native::kGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(d);
    for (int64_t u = begin; u < end; ++u) {
      start_with_self_term(acc.data(), self_rows + u * d, u < n_self ? self_weight : 0.0f, d);
      for (int64_t e = indptr[u]; e < indptr[u + 1]; ++e) {
        const float* r = rows + index[e] * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) acc[j] += r[j];
      }
      T* o = out + u * d;
      for (int64_t j = 0; j < d; ++j) gpse_native::store(o, j, acc[j]);
    }
  });
}

}  // namespace node_sums
