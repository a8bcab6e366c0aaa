// Fused residual-gated aggregation on the CPU (gpse_dgl.kernels.gated_sum):
//
//   out[v] += sum_{e = (u, v)} sigmoid(k[v] + q[u]) * val[u]
//
// One pass over the in-edges of each destination node (CSR by destination): the two source rows an
// edge needs are read once, the gate and the message live in registers, the sum in a per-node buffer.
// No (E, d) tensor exists at any point. Backward recomputes the gates: a pass by destination for the
// gradient of k, a pass by source (CSR by source) for those of q and val, so no two threads add into
// the same row and no atomics are needed. Rows may be float32 or bfloat16 (read as bf16, half the
// bytes); gates, messages and sums are float32, and so are the results.
//
// Gate factorisation: sigmoid(k + q) = 1 / (1 + exp(-k) exp(-q)). The factors exp(-q) of every source
// (and, for the gradients by source, exp(-k) of every destination) are computed once per row by
// `factors` and stored in the rows' dtype; an edge then costs a product, an add and a reciprocal per
// channel instead of an exponential, about a third of the instructions. Both factors and their product
// stay normal floats while |k|, |q| <= kFactorLimit; a row with a larger entry is flagged, and every
// edge with a flagged end takes the direct form sigmoid(k + q), so the result never depends on the
// factorisation's range.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gated_sum.h"
#include "native.h"

namespace {

using namespace gated;

// factor[i] = exp(-x[i]) in x's dtype; flag[i] = 1 where a row has an entry beyond kFactorLimit (its edges
// take the direct form, and its factor row is not written).
template <typename T>
void factors_kernel(Rows<T> x, WritableRows<T> factor, uint8_t* flag, int64_t n, int64_t d) {
  at::parallel_for(0, n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* xi = x[i];
      flag[i] = beyond_factor_range(xi, d);
      if (flag[i]) continue;
      T* fi = factor[i];
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) store(fi, j, exp_approx(-load(xi, j)));
    }
  });
}

// A row (a destination's key, or a source's query) in float32 (`row`) and its factors exp(-row) (`factor`);
// false where the row is flagged (then only `row` is set).
template <typename T>
inline bool load_with_factors(const T* x, float* row, float* factor, int64_t d) {
  float largest = 0.0f;
#pragma omp simd reduction(max : largest)
  for (int64_t j = 0; j < d; ++j) {
    row[j] = load(x, j);
    largest = std::fmax(largest, std::fabs(row[j]));
  }
  if (largest > kFactorLimit) return false;
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) factor[j] = exp_approx(-row[j]);
  return true;
}

// acc += sum over the edges [e0, e1) into destination v (its key `key`, factors `ek` where `factored`) of
// gate * value; rows are prefetched ahead up to edge `prefetch_end`.
template <typename T>
inline void add_edges(int64_t e0, int64_t e1, int64_t prefetch_end, const int64_t* index, Rows<T> q, Rows<T> val,
                      Rows<T> eq, const uint8_t* q_flag, const float* key, const float* ek, bool factored,
                      float* acc, int64_t d) {
  for (int64_t e = e0; e < e1; ++e) {
    if (e + kPrefetchAhead < prefetch_end) {
      const int64_t ahead = index[e + kPrefetchAhead];
      prefetch_row(q_flag[ahead] ? q[ahead] : eq[ahead], d);
      prefetch_row(val[ahead], d);
    }
    const int64_t u = index[e];
    const T* vu = val[u];
    if (factored && !q_flag[u]) {
      const T* eu = eq[u];
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) acc[j] += load(vu, j) / (1.0f + ek[j] * load(eu, j));
    } else {
      const T* qu = q[u];
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) acc[j] += sigmoid(key[j] + load(qu, j)) * load(vu, j);
    }
  }
}

template <typename T>
void forward_hub(int64_t v, const int64_t* indptr, const int64_t* index, Rows<T> k, Rows<T> q, Rows<T> val,
                 Rows<T> eq, const uint8_t* q_flag, OutRows out, int64_t d) {
  std::vector<float> key(d), ek(d);
  const bool factored = load_with_factors(k[v], key.data(), ek.data(), d);
  sum_in_pieces(indptr[v], indptr[v + 1], d, out[v], [&](int64_t a, int64_t z, float* sum) {
    add_edges(a, z, z, index, q, val, eq, q_flag, key.data(), ek.data(), factored, sum, d);
  });
}

template <typename T>
void forward_kernel(const int64_t* indptr, const int64_t* index, Rows<T> k, Rows<T> q, Rows<T> val, Rows<T> eq,
                    const uint8_t* q_flag, OutRows out, int64_t n, int64_t d) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> key(d), ek(d), acc(d);
    const int64_t last_edge = indptr[end];  // prefetching runs on into the next nodes' edges
    for (int64_t v = begin; v < end; ++v) {
      const int64_t e0 = indptr[v], e1 = indptr[v + 1];
      if (e0 == e1 || e1 - e0 > kHubEdges) continue;  // hubs: below
      const bool factored = load_with_factors(k[v], key.data(), ek.data(), d);
      std::fill(acc.begin(), acc.end(), 0.0f);
      add_edges(e0, e1, last_edge, index, q, val, eq, q_flag, key.data(), ek.data(), factored, acc.data(), d);
      float* o = out[v];
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) o[j] += acc[j];
    }
  });
  for (int64_t v = 0; v < n; ++v) {
    if (indptr[v + 1] - indptr[v] > kHubEdges) forward_hub(v, indptr, index, k, q, val, eq, q_flag, out, d);
  }
}

// grad_k[v] = sum_{e = (u, v)} g[v] * val[u] * s * (1 - s),  s = sigmoid(k[v] + q[u]); summed in float32 and
// written once per row in the rows' dtype T (rows without in-edges get 0), so the caller neither fills nor casts.
template <typename T>
void grad_key_kernel(const int64_t* indptr, const int64_t* index, Rows<T> k, Rows<T> q, Rows<T> val, Rows<T> eq,
                     const uint8_t* q_flag, const float* grad_out, T* grad_k, int64_t n, int64_t d) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> key(d), ek(d), acc(d);
    for (int64_t v = begin; v < end; ++v) {
      const int64_t e0 = indptr[v], e1 = indptr[v + 1];
      std::fill(acc.begin(), acc.end(), 0.0f);
      const bool factored = e0 < e1 && load_with_factors(k[v], key.data(), ek.data(), d);
      const float* g = grad_out + v * d;
      for (int64_t e = e0; e < e1; ++e) {
        const int64_t u = index[e];
        const T* vu = val[u];
        if (factored && !q_flag[u]) {
          const T* eu = eq[u];
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) {
            const float s = 1.0f / (1.0f + ek[j] * load(eu, j));
            acc[j] += g[j] * load(vu, j) * s * (1.0f - s);
          }
        } else {
          const T* qu = q[u];
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) {
            const float s = sigmoid(key[j] + load(qu, j));
            acc[j] += g[j] * load(vu, j) * s * (1.0f - s);
          }
        }
      }
      T* gk = grad_k + v * d;
      for (int64_t j = 0; j < d; ++j) store(gk, j, acc[j]);
    }
  });
}

// By source u over its out-edges (u, v): grad_val[u] = sum s * g[v],  grad_q[u] = sum g[v] * val[u] * s * (1 - s);
// ek / k_flag: the destinations' factors. Summed in float32, written once per row in T (as grad_key_kernel).
template <typename T>
void grad_source_kernel(const int64_t* indptr, const int64_t* index, Rows<T> k, Rows<T> q, Rows<T> val, Rows<T> ek,
                        const uint8_t* k_flag, const float* grad_out, T* grad_q, T* grad_val, int64_t n, int64_t d) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> query(d), eq(d), value(d), s(d), acc_q(d), acc_v(d);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t e0 = indptr[u], e1 = indptr[u + 1];
      std::fill(acc_q.begin(), acc_q.end(), 0.0f);
      std::fill(acc_v.begin(), acc_v.end(), 0.0f);
      const bool factored = e0 < e1 && load_with_factors(q[u], query.data(), eq.data(), d);
      const T* vu = val[u];
      if (e0 < e1) {
        for (int64_t j = 0; j < d; ++j) value[j] = load(vu, j);
      }
      for (int64_t e = e0; e < e1; ++e) {
        const int64_t v = index[e];
        const float* g = grad_out + v * d;
        if (factored && !k_flag[v]) {
          const T* fv = ek[v];
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) s[j] = 1.0f / (1.0f + eq[j] * load(fv, j));
        } else {
          const T* kv = k[v];
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) s[j] = sigmoid(load(kv, j) + query[j]);
        }
        if (grad_val) {
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) acc_v[j] += s[j] * g[j];
        }
        if (grad_q) {
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) acc_q[j] += g[j] * value[j] * s[j] * (1.0f - s[j]);
        }
      }
      if (grad_val) {
        T* gv = grad_val + u * d;
        for (int64_t j = 0; j < d; ++j) store(gv, j, acc_v[j]);
      }
      if (grad_q) {
        T* gq = grad_q + u * d;
        for (int64_t j = 0; j < d; ++j) store(gq, j, acc_q[j]);
      }
    }
  });
}

}  // namespace

// factor = exp(-x) row by row in x's dtype, flag[i] = 1 where row i has an entry beyond the factorisation's range.
void gated_sum_factors(at::Tensor x, at::Tensor factor, at::Tensor flag) {
  check_rows(x, "x", x.size(1));
  check_factors(factor, flag, x);
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    factors_kernel<T>(rows<T>(x), writable_rows<T>(factor), flag.data_ptr<uint8_t>(), x.size(0), x.size(1));
  });
}

// out (float32, (n_dst, d), contiguous rows) += the gated sum; k: (n_dst, d); q, val: (n_src, d); eq, q_flag: the
// factors of q; indptr/index: CSR by destination. k, q, val and out may be column slices of wider tensors.
void gated_sum_forward(at::Tensor indptr, at::Tensor index, at::Tensor k, at::Tensor q, at::Tensor val,
                       at::Tensor eq, at::Tensor q_flag, at::Tensor out) {
  const int64_t n = out.size(0), d = out.size(1);
  check_csr(indptr, index, n);
  check_gates(k, q, val, d);
  check_factors(eq, q_flag, q);
  TORCH_CHECK(out.scalar_type() == at::kFloat && out.dim() == 2 && out.stride(1) == 1,
              "out must be float32 with contiguous rows");
  dispatch(k, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T>(indptr.data_ptr<int64_t>(), index.data_ptr<int64_t>(), rows<T>(k), rows<T>(q), rows<T>(val),
                      rows<T>(eq), q_flag.data_ptr<uint8_t>(), OutRows{out.data_ptr<float>(), out.stride(0)}, n,
                      d);
  });
}

// grad_k ((n_dst, d), contiguous, k's dtype) = d loss / d k, every row written; by destination (dst_indptr /
// dst_index).
void gated_sum_grad_key(at::Tensor indptr, at::Tensor index, at::Tensor k, at::Tensor q, at::Tensor val,
                        at::Tensor eq, at::Tensor q_flag, at::Tensor grad_out, at::Tensor grad_k) {
  const int64_t n = grad_k.size(0), d = grad_k.size(1);
  check_csr(indptr, index, n);
  check_gates(k, q, val, d);
  check_factors(eq, q_flag, q);
  check_float(grad_out, "grad_out");
  check_grad(grad_k, "grad_k", k, n);
  dispatch(k, [&](auto tag) {
    using T = decltype(tag);
    grad_key_kernel<T>(indptr.data_ptr<int64_t>(), index.data_ptr<int64_t>(), rows<T>(k), rows<T>(q), rows<T>(val),
                       rows<T>(eq), q_flag.data_ptr<uint8_t>(), grad_out.data_ptr<float>(),
                       grad_k.data_ptr<T>(), n, d);
  });
}

// grad_q, grad_val ((n_src, d), contiguous, q's dtype; either may be None) = their gradients, every row written;
// by source (src_indptr / src_index: for each source, the destinations of its out-edges); ek, k_flag: the
// factors of k.
void gated_sum_grad_source(at::Tensor indptr, at::Tensor index, at::Tensor k, at::Tensor q, at::Tensor val,
                           at::Tensor ek, at::Tensor k_flag, at::Tensor grad_out, c10::optional<at::Tensor> grad_q,
                           c10::optional<at::Tensor> grad_val) {
  const int64_t n = q.size(0), d = q.size(1);
  check_csr(indptr, index, n);
  check_gates(k, q, val, d);
  check_factors(ek, k_flag, k);
  check_float(grad_out, "grad_out");
  if (grad_q) check_grad(*grad_q, "grad_q", q, n);
  if (grad_val) check_grad(*grad_val, "grad_val", q, n);
  if (!grad_q && !grad_val) return;
  dispatch(k, [&](auto tag) {
    using T = decltype(tag);
    grad_source_kernel<T>(indptr.data_ptr<int64_t>(), index.data_ptr<int64_t>(), rows<T>(k), rows<T>(q),
                          rows<T>(val), rows<T>(ek), k_flag.data_ptr<uint8_t>(), grad_out.data_ptr<float>(),
                          grad_q ? grad_q->data_ptr<T>() : nullptr, grad_val ? grad_val->data_ptr<T>() : nullptr, n, d);
  });
}

static const gpse_native::Binding binding([](pybind11::module_& m) {
  m.def("gated_sum_factors", &gated_sum_factors,
        "exp(-x) row by row, and a flag per row outside the factorisation's range");
  m.def("gated_sum_forward", &gated_sum_forward, "gated sum, forward (adds into out)");
  m.def("gated_sum_grad_key", &gated_sum_grad_key, "gated sum, gradient of the destination gate");
  m.def("gated_sum_grad_source", &gated_sum_grad_source, "gated sum, gradients of the source gate and value");
});
