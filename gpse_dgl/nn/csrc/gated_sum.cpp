// Fused residual-gated aggregation on the CPU (gpse_dgl.nn.native):
//
//   out[v] += sum_{e = (u, v)} sigmoid(k[v] + q[u]) * val[u]
//
// One pass over the in-edges of each destination node (CSR by destination): the two source rows an
// edge needs are read once, the gate and the message live in registers, the sum in a per-node buffer.
// No (E, d) tensor exists at any point. Backward recomputes the gates: a pass by destination for the
// gradient of k, a pass by source (CSR by source) for those of q and val, so no two threads add into
// the same row and no atomics are needed. Rows may be float32 or bfloat16 (read as bf16, half the
// bytes); gates, messages and sums are float32, and so are the results.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

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

template <typename T>
void forward_kernel(const int64_t* indptr, const int64_t* index, Rows<T> k, Rows<T> q, Rows<T> val, float* out,
                    int64_t n, int64_t d) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> key(d), acc(d);
    const int64_t last_edge = indptr[end];  // prefetching runs on into the next nodes' edges
    for (int64_t v = begin; v < end; ++v) {
      const int64_t e0 = indptr[v], e1 = indptr[v + 1];
      if (e0 == e1) continue;
      const T* kv = k[v];
      for (int64_t j = 0; j < d; ++j) {
        key[j] = load(kv, j);
        acc[j] = 0.0f;
      }
      for (int64_t e = e0; e < e1; ++e) {
        if (e + kPrefetchAhead < last_edge) {
          prefetch_row(q[index[e + kPrefetchAhead]], d);
          prefetch_row(val[index[e + kPrefetchAhead]], d);
        }
        const T* qu = q[index[e]];
        const T* vu = val[index[e]];
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) acc[j] += sigmoid(key[j] + load(qu, j)) * load(vu, j);
      }
      float* o = out + v * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) o[j] += acc[j];
    }
  });
}

// grad_k[v] = sum_{e = (u, v)} g[v] * val[u] * s * (1 - s),  s = sigmoid(k[v] + q[u])
template <typename T>
void grad_key_kernel(const int64_t* indptr, const int64_t* index, Rows<T> k, Rows<T> q, Rows<T> val,
                     const float* grad_out, float* grad_k, int64_t n, int64_t d) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> key(d);
    for (int64_t v = begin; v < end; ++v) {
      const int64_t e0 = indptr[v], e1 = indptr[v + 1];
      if (e0 == e1) continue;
      const T* kv = k[v];
      const float* g = grad_out + v * d;
      float* gk = grad_k + v * d;
      for (int64_t j = 0; j < d; ++j) key[j] = load(kv, j);
      for (int64_t e = e0; e < e1; ++e) {
        const T* qu = q[index[e]];
        const T* vu = val[index[e]];
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {
          const float s = sigmoid(key[j] + load(qu, j));
          gk[j] += g[j] * load(vu, j) * s * (1.0f - s);
        }
      }
    }
  });
}

// By source u over its out-edges (u, v): grad_val[u] += s * g[v],  grad_q[u] += g[v] * val[u] * s * (1 - s)
template <typename T>
void grad_source_kernel(const int64_t* indptr, const int64_t* index, Rows<T> k, Rows<T> q, Rows<T> val,
                        const float* grad_out, float* grad_q, float* grad_val, int64_t n, int64_t d) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> query(d), value(d);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t e0 = indptr[u], e1 = indptr[u + 1];
      if (e0 == e1) continue;
      const T* qu = q[u];
      const T* vu = val[u];
      for (int64_t j = 0; j < d; ++j) {
        query[j] = load(qu, j);
        value[j] = load(vu, j);
      }
      float* gq = grad_q ? grad_q + u * d : nullptr;
      float* gv = grad_val ? grad_val + u * d : nullptr;
      for (int64_t e = e0; e < e1; ++e) {
        const int64_t v = index[e];
        const T* kv = k[v];
        const float* g = grad_out + v * d;
        if (gq && gv) {
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) {
            const float s = sigmoid(load(kv, j) + query[j]);
            gv[j] += s * g[j];
            gq[j] += g[j] * value[j] * s * (1.0f - s);
          }
        } else if (gv) {
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) gv[j] += sigmoid(load(kv, j) + query[j]) * g[j];
        } else {
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) {
            const float s = sigmoid(load(kv, j) + query[j]);
            gq[j] += g[j] * value[j] * s * (1.0f - s);
          }
        }
      }
    }
  });
}

void check_rows(const at::Tensor& t, const char* name, int64_t d) {
  TORCH_CHECK(t.dim() == 2 && t.size(1) == d && t.stride(1) == 1, name,
              " must be 2-D with contiguous rows of width ", d);
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16, name, " must be float32 or bfloat16");
}

void check_csr(const at::Tensor& indptr, const at::Tensor& index, int64_t n) {
  TORCH_CHECK(indptr.scalar_type() == at::kLong && index.scalar_type() == at::kLong, "indices must be int64");
  TORCH_CHECK(indptr.is_contiguous() && index.is_contiguous() && indptr.numel() == n + 1, "bad CSR");
}

}  // namespace

// out (float32, (n_dst, d)) += the gated sum; k: (n_dst, d); q, val: (n_src, d); indptr/index: CSR by destination.
void gated_sum_forward(at::Tensor indptr, at::Tensor index, at::Tensor k, at::Tensor q, at::Tensor val,
                       at::Tensor out) {
  const int64_t n = out.size(0), d = out.size(1);
  check_csr(indptr, index, n);
  check_rows(k, "k", d);
  check_rows(q, "q", d);
  check_rows(val, "val", d);
  TORCH_CHECK(out.scalar_type() == at::kFloat && out.is_contiguous(), "out must be contiguous float32");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && q.scalar_type() == val.scalar_type(), "k, q, val: one dtype");
  if (k.scalar_type() == at::kFloat) {
    forward_kernel<float>(indptr.data_ptr<int64_t>(), index.data_ptr<int64_t>(), rows<float>(k), rows<float>(q),
                          rows<float>(val), out.data_ptr<float>(), n, d);
  } else {
    forward_kernel<at::BFloat16>(indptr.data_ptr<int64_t>(), index.data_ptr<int64_t>(), rows<at::BFloat16>(k),
                                 rows<at::BFloat16>(q), rows<at::BFloat16>(val), out.data_ptr<float>(), n, d);
  }
}

// grad_k (float32, (n_dst, d)) += d loss / d k, by destination (dst_indptr / dst_index).
void gated_sum_grad_key(at::Tensor indptr, at::Tensor index, at::Tensor k, at::Tensor q, at::Tensor val,
                        at::Tensor grad_out, at::Tensor grad_k) {
  const int64_t n = grad_k.size(0), d = grad_k.size(1);
  check_csr(indptr, index, n);
  TORCH_CHECK(grad_out.is_contiguous() && grad_out.scalar_type() == at::kFloat, "grad_out: contiguous float32");
  TORCH_CHECK(grad_k.is_contiguous() && grad_k.scalar_type() == at::kFloat, "grad_k: contiguous float32");
  if (k.scalar_type() == at::kFloat) {
    grad_key_kernel<float>(indptr.data_ptr<int64_t>(), index.data_ptr<int64_t>(), rows<float>(k), rows<float>(q),
                           rows<float>(val), grad_out.data_ptr<float>(), grad_k.data_ptr<float>(), n, d);
  } else {
    grad_key_kernel<at::BFloat16>(indptr.data_ptr<int64_t>(), index.data_ptr<int64_t>(), rows<at::BFloat16>(k),
                                  rows<at::BFloat16>(q), rows<at::BFloat16>(val), grad_out.data_ptr<float>(),
                                  grad_k.data_ptr<float>(), n, d);
  }
}

// grad_q, grad_val (float32, (n_src, d); either may be empty) += their gradients, by source
// (src_indptr / src_index: for each source, the destinations of its out-edges).
void gated_sum_grad_source(at::Tensor indptr, at::Tensor index, at::Tensor k, at::Tensor q, at::Tensor val,
                           at::Tensor grad_out, at::Tensor grad_q, at::Tensor grad_val) {
  const int64_t n = q.size(0), d = q.size(1);
  check_csr(indptr, index, n);
  TORCH_CHECK(grad_out.is_contiguous() && grad_out.scalar_type() == at::kFloat, "grad_out: contiguous float32");
  float* gq = grad_q.numel() ? grad_q.data_ptr<float>() : nullptr;
  float* gv = grad_val.numel() ? grad_val.data_ptr<float>() : nullptr;
  if (!gq && !gv) return;
  if (k.scalar_type() == at::kFloat) {
    grad_source_kernel<float>(indptr.data_ptr<int64_t>(), index.data_ptr<int64_t>(), rows<float>(k),
                              rows<float>(q), rows<float>(val), grad_out.data_ptr<float>(), gq, gv, n, d);
  } else {
    grad_source_kernel<at::BFloat16>(indptr.data_ptr<int64_t>(), index.data_ptr<int64_t>(), rows<at::BFloat16>(k),
                                     rows<at::BFloat16>(q), rows<at::BFloat16>(val), grad_out.data_ptr<float>(), gq,
                                     gv, n, d);
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &gated_sum_forward, "gated sum, forward (adds into out)");
  m.def("grad_key", &gated_sum_grad_key, "gated sum, gradient of the destination gate");
  m.def("grad_source", &gated_sum_grad_source, "gated sum, gradients of the source gate and value");
}
