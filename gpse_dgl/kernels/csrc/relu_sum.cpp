// GINE's aggregation out[v] = w x[v] + sum_{e = (u, v)} relu(x[u] + ef[e]) and its gradients, without an (E, d)
// message; w is GINE's 1 + eps (0: the sum alone).
//
// Forward: by destination (CSR of the in-edges: their sources and edge ids), one pass; each edge reads x[u] and
// ef[e] once and adds relu(x[u] + ef[e]) to a float32 row held while its destination is summed.
// Backward, one pass by source (CSR of the out-edges: their destinations and edge ids) and no atomics: for each of
// u's out-edges e = (u, v), grad_ef[e] = grad_out[v] * (x[u] + ef[e] > 0), every edge's row written once (float32),
// and the same row added to grad_x[u] = w grad_out[u] + sum over u's out-edges of grad_ef[e]; x[u] is read once
// per source, and no edge row is read back.
// The autograd function (ReluSum, bound as `relu_sum`) is C++'s own: no Python runs between the passes, forward or
// backward, which at a batch of small molecules costs more than the kernels themselves.
// Rows are float32 or bfloat16; every sum is float32 and runs over a node's edges in edge-id order on one thread,
// so the result does not depend on the number of threads.
#include "edge_csr.h"
#include "rows.h"
#include "node_sums.h"

namespace {

using graph_csr::EdgeCsr;
using gpse_native::load;
using gpse_native::Rows;

template <typename T>
void forward_kernel(const int64_t* indptr, const int64_t* src, const int64_t* eid, Rows<T> x, Rows<T> ef,
                    float self_weight, float* out, int64_t n, int64_t d) {
  at::parallel_for(0, n, gpse_native::kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      float* acc = out + v * d;
      node_sums::start_with_self_term(acc, x[v], self_weight, d);
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
        if (e + gpse_native::kPrefetchAhead < indptr[v + 1]) {
          gpse_native::prefetch_row(x[src[e + gpse_native::kPrefetchAhead]], d);
        }
        const T* xu = x[src[e]];
        const T* fe = ef[eid[e]];
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) acc[j] += std::fmax(load(xu, j) + load(fe, j), 0.0f);
      }
    }
  });
}

// grad_ef (float32, (E, d)) row e = grad_out[v] where x[u] + ef[e] > 0, else 0, and, where grad_x is given,
// grad_x[u] = w grad_out[u] (u < n_dst) + the sum of u's grad_ef rows in edge order: one task per source, so every
// row is written by one thread and each sum runs in one order on any thread count.
template <typename T>
void grad_by_source_kernel(const int64_t* indptr, const int64_t* dst, const int64_t* eid, Rows<T> x, Rows<T> ef,
                           const float* grad_out, float self_weight, int64_t n_dst, float* grad_ef, T* grad_x,
                           int64_t n_src, int64_t d) {
  at::parallel_for(0, n_src, gpse_native::kGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(d);
    for (int64_t u = begin; u < end; ++u) {
      if (grad_x != nullptr) {
        node_sums::start_with_self_term(acc.data(), grad_out + u * d, u < n_dst ? self_weight : 0.0f, d);
      }
      const T* xu = x[u];
      for (int64_t e = indptr[u]; e < indptr[u + 1]; ++e) {
        if (e + gpse_native::kPrefetchAhead < indptr[u + 1]) {
          gpse_native::prefetch_row(grad_out + dst[e + gpse_native::kPrefetchAhead] * d, d);
        }
        const float* g = grad_out + dst[e] * d;
        const T* fe = ef[eid[e]];
        float* ge = grad_ef + eid[e] * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) ge[j] = load(xu, j) + load(fe, j) > 0.0f ? g[j] : 0.0f;
        if (grad_x != nullptr) {
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) acc[j] += ge[j];
        }
      }
      if (grad_x != nullptr) {
        T* o = grad_x + u * d;
        for (int64_t j = 0; j < d; ++j) gpse_native::store(o, j, acc[j]);
      }
    }
  });
}

void check_inputs(const at::Tensor& indptr, const at::Tensor& src, const at::Tensor& eid, const at::Tensor& x,
                  const at::Tensor& ef, int64_t n) {
  gpse_native::check_csr(indptr, src, n);
  gpse_native::check_csr(indptr, eid, n);
  TORCH_CHECK(src.numel() == eid.numel() && eid.numel() == ef.size(0), "one source and one edge id per edge");
  gpse_native::check_rows(x, "x", x.size(1));
  gpse_native::check_rows(ef, "ef", x.size(1));
  TORCH_CHECK(x.scalar_type() == ef.scalar_type(), "x, ef: one dtype");
}

at::Tensor run_forward(const EdgeCsr& g, const at::Tensor& x, const at::Tensor& ef, double self_weight) {
  const int64_t n = g.num_dst(), d = x.size(1);
  check_inputs(g.dst_indptr, g.dst_src, g.dst_eid, x, ef, n);
  gpse_native::check_csr(g.src_indptr, g.src_dst, x.size(0));  // the backward's CSR, checked where the call is made
  gpse_native::check_csr(g.src_indptr, g.src_eid, x.size(0));
  gpse_native::check(self_weight == 0.0 || n <= x.size(0), "the self term needs a row of x per destination");
  at::Tensor out = at::empty({n, d}, x.options().dtype(at::kFloat));
  gpse_native::dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T>(g.dst_indptr.data_ptr<int64_t>(), g.dst_src.data_ptr<int64_t>(), g.dst_eid.data_ptr<int64_t>(),
                      gpse_native::rows<T>(x), gpse_native::rows<T>(ef), static_cast<float>(self_weight),
                      out.data_ptr<float>(), n, d);
  });
  return out;
}

// grad_ef (float32, (E, d)) and, when asked for, grad_x (x's dtype), in one pass by source.
std::pair<at::Tensor, at::Tensor> run_backward(const EdgeCsr& g, const at::Tensor& x, const at::Tensor& ef,
                                               double self_weight, at::Tensor grad_out, bool want_x) {
  const int64_t n_dst = g.num_dst(), n_src = x.size(0), d = x.size(1);
  grad_out = grad_out.to(at::kFloat).contiguous();
  at::Tensor grad_ef = at::empty(ef.sizes(), ef.options().dtype(at::kFloat));
  at::Tensor grad_x = want_x ? at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous))
                             : at::Tensor();
  gpse_native::dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    grad_by_source_kernel<T>(g.src_indptr.data_ptr<int64_t>(), g.src_dst.data_ptr<int64_t>(),
                             g.src_eid.data_ptr<int64_t>(), gpse_native::rows<T>(x), gpse_native::rows<T>(ef),
                             grad_out.data_ptr<float>(), static_cast<float>(self_weight), n_dst,
                             grad_ef.data_ptr<float>(), want_x ? grad_x.data_ptr<T>() : nullptr, n_src, d);
  });
  return {grad_ef, grad_x};
}

struct ReluSum : public torch::autograd::Function<ReluSum> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, at::Tensor ef, double self_weight,
                            std::vector<at::Tensor> csr) {
    const EdgeCsr g = EdgeCsr::from(csr);
    ctx->save_for_backward(g.after({x, ef}));
    ctx->saved_data["self_weight"] = self_weight;
    return run_forward(g, x, ef, self_weight);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const double self_weight = ctx->saved_data["self_weight"].toDouble();
    auto [grad_ef, grad_x] =
        run_backward(EdgeCsr::from(saved, 2), saved[0], saved[1], self_weight, grads[0], ctx->needs_input_grad(0));
    at::Tensor grad_e = ctx->needs_input_grad(1) ? grad_ef.to(saved[1].scalar_type()) : at::Tensor();
    return {grad_x, grad_e, at::Tensor(), at::Tensor()};
  }
};

// out (float32, (n_dst, d)) = self_weight * x[:n_dst] + the sum, with autograd (x: (n_src, d) and ef: (E, d),
// float32 or bfloat16 of one dtype, rows contiguous; csr: the arrays of edge_csr, as csr.EdgeCSR holds them).
at::Tensor relu_sum(at::Tensor x, at::Tensor ef, double self_weight, std::vector<at::Tensor> csr) {
  GPSE_PROFILED("ReluSum");
  return ReluSum::apply(x, ef, self_weight, csr);
}

}  // namespace

static const gpse_native::Binding binding([](pybind11::module_& m) {
  m.def("relu_sum", &relu_sum, "w x[v] + sum of relu(x[u] + ef[e]) over each destination's in-edges, with autograd");
});
