// GINE's aggregation out[v] = sum_{e = (u, v)} relu(x[u] + ef[e]) and its gradients, without an (E, d) message.
//
// Forward: by destination (CSR of the in-edges: their sources and edge ids), one pass; each edge reads x[u] and
// ef[e] once and adds relu(x[u] + ef[e]) to a float32 row held while its destination is summed.
// Backward, two passes and no atomics:
//   1. by destination: grad_ef[e] = grad_out[v] * (x[u] + ef[e] > 0), every edge's row written once (float32);
//   2. by source (CSR of the out-edges: their edge ids): grad_x[u] = sum over u's out-edges of grad_ef[e].
// Rows are float32 or bfloat16; every sum is float32 and runs over a node's edges in edge-id order on one thread,
// so the result does not depend on the number of threads.
#include "gated_sum.h"

namespace {

using gated::load;
using gated::Rows;
using gated::store;

template <typename T>
void forward_kernel(const int64_t* indptr, const int64_t* src, const int64_t* eid, Rows<T> x, Rows<T> ef,
                    float* out, int64_t n, int64_t d) {
  at::parallel_for(0, n, gated::kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      float* acc = out + v * d;
      std::fill(acc, acc + d, 0.0f);
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
        if (e + gated::kPrefetchAhead < indptr[v + 1]) {
          gated::prefetch_row(x[src[e + gated::kPrefetchAhead]], d);
        }
        const T* xu = x[src[e]];
        const T* fe = ef[eid[e]];
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) acc[j] += std::fmax(load(xu, j) + load(fe, j), 0.0f);
      }
    }
  });
}

// Pass 1: grad_ef (float32, (E, d)) row e = grad_out[v] where x[u] + ef[e] > 0, else 0.
template <typename T>
void grad_edge_kernel(const int64_t* indptr, const int64_t* src, const int64_t* eid, Rows<T> x, Rows<T> ef,
                      const float* grad_out, float* grad_ef, int64_t n, int64_t d) {
  at::parallel_for(0, n, gated::kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      const float* g = grad_out + v * d;
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
        const T* xu = x[src[e]];
        const T* fe = ef[eid[e]];
        float* ge = grad_ef + eid[e] * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) ge[j] = load(xu, j) + load(fe, j) > 0.0f ? g[j] : 0.0f;
      }
    }
  });
}

// Pass 2: grad_x[u] (T, every row written) = sum over u's out-edges (edge ids `eid`) of grad_ef[e], in float32.
template <typename T>
void grad_source_kernel(const int64_t* indptr, const int64_t* eid, const float* grad_ef, T* grad_x, int64_t n,
                        int64_t d) {
  at::parallel_for(0, n, gated::kGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(d);
    for (int64_t u = begin; u < end; ++u) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t e = indptr[u]; e < indptr[u + 1]; ++e) {
        const float* ge = grad_ef + eid[e] * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) acc[j] += ge[j];
      }
      T* gx = grad_x + u * d;
      for (int64_t j = 0; j < d; ++j) store(gx, j, acc[j]);
    }
  });
}

void check_inputs(const at::Tensor& indptr, const at::Tensor& src, const at::Tensor& eid, const at::Tensor& x,
                  const at::Tensor& ef, int64_t n) {
  gated::check_csr(indptr, src, n);
  gated::check_csr(indptr, eid, n);
  TORCH_CHECK(src.numel() == eid.numel() && eid.numel() == ef.size(0), "one source and one edge id per edge");
  gated::check_rows(x, "x", x.size(1));
  gated::check_rows(ef, "ef", x.size(1));
  TORCH_CHECK(x.scalar_type() == ef.scalar_type(), "x, ef: one dtype");
}

}  // namespace

// out (float32, (n_dst, d), contiguous; every row written) = the sum; indptr / src / eid: the in-edges by
// destination (their sources and edge ids); x: (n_src, d); ef: (E, d), rows contiguous.
void relu_sum_forward(at::Tensor indptr, at::Tensor src, at::Tensor eid, at::Tensor x, at::Tensor ef, at::Tensor out) {
  const int64_t n = out.size(0), d = x.size(1);
  check_inputs(indptr, src, eid, x, ef, n);
  gated::check_float(out, "out");
  TORCH_CHECK(out.dim() == 2 && out.size(1) == d, "out must be (n_dst, d)");
  gated::dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T>(indptr.data_ptr<int64_t>(), src.data_ptr<int64_t>(), eid.data_ptr<int64_t>(),
                      gated::rows<T>(x), gated::rows<T>(ef), out.data_ptr<float>(), n, d);
  });
}

// grad_ef (float32, (E, d), contiguous; every row written) = d loss / d ef (pass 1, by destination).
void relu_sum_grad_edge(at::Tensor indptr, at::Tensor src, at::Tensor eid, at::Tensor x, at::Tensor ef,
                        at::Tensor grad_out, at::Tensor grad_ef) {
  const int64_t n = grad_out.size(0), d = x.size(1);
  check_inputs(indptr, src, eid, x, ef, n);
  gated::check_float(grad_out, "grad_out");
  gated::check_float(grad_ef, "grad_ef");
  TORCH_CHECK(grad_out.size(1) == d && grad_ef.sizes() == ef.sizes(), "grad_out: (n_dst, d), grad_ef: ef's shape");
  gated::dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    grad_edge_kernel<T>(indptr.data_ptr<int64_t>(), src.data_ptr<int64_t>(), eid.data_ptr<int64_t>(),
                        gated::rows<T>(x), gated::rows<T>(ef), grad_out.data_ptr<float>(),
                        grad_ef.data_ptr<float>(), n, d);
  });
}

// grad_x ((n_src, d), contiguous, float32 or bfloat16; every row written) = per source, the sum of grad_ef over
// its out-edges (pass 2; indptr / eid: the out-edges by source, their edge ids).
void relu_sum_grad_source(at::Tensor indptr, at::Tensor eid, at::Tensor grad_ef, at::Tensor grad_x) {
  const int64_t n = grad_x.size(0), d = grad_x.size(1);
  gated::check_csr(indptr, eid, n);
  gated::check_float(grad_ef, "grad_ef");
  TORCH_CHECK(grad_x.is_contiguous() && grad_ef.dim() == 2 && grad_ef.size(1) == d && grad_ef.size(0) == eid.numel(),
              "grad_x must be contiguous and as wide as grad_ef, with one edge id per edge");
  TORCH_CHECK(grad_x.scalar_type() == at::kFloat || grad_x.scalar_type() == at::kBFloat16,
              "grad_x must be float32 or bfloat16");
  gated::dispatch(grad_x, [&](auto tag) {
    using T = decltype(tag);
    grad_source_kernel<T>(indptr.data_ptr<int64_t>(), eid.data_ptr<int64_t>(), grad_ef.data_ptr<float>(),
                          grad_x.data_ptr<T>(), n, d);
  });
}

static const gpse_native::Binding binding([](pybind11::module_& m) {
  m.def("relu_sum_forward", &relu_sum_forward, "sum of relu(x[u] + ef[e]) over each destination's in-edges");
  m.def("relu_sum_grad_edge", &relu_sum_grad_edge, "relu sum, gradient of the edge features (by destination)");
  m.def("relu_sum_grad_source", &relu_sum_grad_source, "relu sum, gradient of the sources (by source)");
});
