// GINE's aggregation out[v] = w x[v] + sum_{e = (u, v)} relu(x[u] + ef[e]) and its gradients, without an (E, d)
// message; w is GINE's 1 + eps (0: the sum alone).
//
// Forward: by destination (CSR of the in-edges: their sources and edge ids), one pass; each edge reads x[u] and
// ef[e] once and adds relu(x[u] + ef[e]) to a float32 row held while its destination is summed.
// Backward, two passes and no atomics:
//   1. by destination: grad_ef[e] = grad_out[v] * (x[u] + ef[e] > 0), every edge's row written once (float32);
//   2. by source (CSR of the out-edges: their edge ids): grad_x[u] = w grad_out[u] + sum over u's out-edges of
//      grad_ef[e].
// The autograd function (ReluSum, bound as `relu_sum`) is C++'s own: no Python runs between the passes, forward or
// backward, which at a batch of small molecules costs more than the kernels themselves.
// Rows are float32 or bfloat16; every sum is float32 and runs over a node's edges in edge-id order on one thread,
// so the result does not depend on the number of threads.
#include "gated_sum.h"
#include "node_sums.h"

namespace {

using gated::load;
using gated::Rows;

template <typename T>
void forward_kernel(const int64_t* indptr, const int64_t* src, const int64_t* eid, Rows<T> x, Rows<T> ef,
                    float self_weight, float* out, int64_t n, int64_t d) {
  at::parallel_for(0, n, gated::kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      float* acc = out + v * d;
      node_sums::start_with_self_term(acc, x[v], self_weight, d);
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

void check_inputs(const at::Tensor& indptr, const at::Tensor& src, const at::Tensor& eid, const at::Tensor& x,
                  const at::Tensor& ef, int64_t n) {
  gated::check_csr(indptr, src, n);
  gated::check_csr(indptr, eid, n);
  TORCH_CHECK(src.numel() == eid.numel() && eid.numel() == ef.size(0), "one source and one edge id per edge");
  gated::check_rows(x, "x", x.size(1));
  gated::check_rows(ef, "ef", x.size(1));
  TORCH_CHECK(x.scalar_type() == ef.scalar_type(), "x, ef: one dtype");
}

// Every operand of one call: the graph's two CSRs (in-edges by destination with their sources and edge ids,
// out-edges by source with their edge ids) and the rows.
struct Graph {
  at::Tensor dst_indptr, dst_src, dst_eid, src_indptr, src_eid;
};

at::Tensor run_forward(const Graph& g, const at::Tensor& x, const at::Tensor& ef, double self_weight) {
  const int64_t n = g.dst_indptr.numel() - 1, d = x.size(1);
  check_inputs(g.dst_indptr, g.dst_src, g.dst_eid, x, ef, n);
  gpse_native::check(self_weight == 0.0 || n <= x.size(0), "the self term needs a row of x per destination");
  at::Tensor out = at::empty({n, d}, x.options().dtype(at::kFloat));
  gated::dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T>(g.dst_indptr.data_ptr<int64_t>(), g.dst_src.data_ptr<int64_t>(), g.dst_eid.data_ptr<int64_t>(),
                      gated::rows<T>(x), gated::rows<T>(ef), static_cast<float>(self_weight),
                      out.data_ptr<float>(), n, d);
  });
  return out;
}

// grad_ef (float32, (E, d)) by destination, then grad_x (x's dtype) by source when asked for.
std::pair<at::Tensor, at::Tensor> run_backward(const Graph& g, const at::Tensor& x, const at::Tensor& ef,
                                               double self_weight, at::Tensor grad_out, bool want_x) {
  const int64_t n = g.dst_indptr.numel() - 1, d = x.size(1);
  grad_out = grad_out.to(at::kFloat).contiguous();
  at::Tensor grad_ef = at::empty(ef.sizes(), ef.options().dtype(at::kFloat));
  at::Tensor grad_x;
  gated::dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    grad_edge_kernel<T>(g.dst_indptr.data_ptr<int64_t>(), g.dst_src.data_ptr<int64_t>(), g.dst_eid.data_ptr<int64_t>(),
                        gated::rows<T>(x), gated::rows<T>(ef), grad_out.data_ptr<float>(), grad_ef.data_ptr<float>(),
                        n, d);
    if (want_x) {
      grad_x = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
      // pass 2: grad_x[u] = w grad_out[u] + the sum of grad_ef over u's out-edges
      node_sums::sum_by_node<T>(g.src_indptr.data_ptr<int64_t>(), g.src_eid.data_ptr<int64_t>(),
                                grad_ef.data_ptr<float>(), grad_out.data_ptr<float>(), static_cast<float>(self_weight),
                                n, grad_x.data_ptr<T>(), x.size(0), d);
    }
  });
  return {grad_ef, grad_x};
}

struct ReluSum : public torch::autograd::Function<ReluSum> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, at::Tensor ef, double self_weight,
                            at::Tensor dst_indptr, at::Tensor dst_src, at::Tensor dst_eid, at::Tensor src_indptr,
                            at::Tensor src_eid) {
    ctx->save_for_backward({x, ef, dst_indptr, dst_src, dst_eid, src_indptr, src_eid});
    ctx->saved_data["self_weight"] = self_weight;
    return run_forward({dst_indptr, dst_src, dst_eid, src_indptr, src_eid}, x, ef, self_weight);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Graph g{saved[2], saved[3], saved[4], saved[5], saved[6]};
    auto [grad_ef, grad_x] = run_backward(g, saved[0], saved[1], ctx->saved_data["self_weight"].toDouble(),
                                          grads[0], ctx->needs_input_grad(0));
    at::Tensor grad_e = ctx->needs_input_grad(1) ? grad_ef.to(saved[1].scalar_type()) : at::Tensor();
    return {grad_x, grad_e, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// out (float32, (n_dst, d)) = self_weight * x[:n_dst] + the sum, with autograd (x: (n_src, d) and ef: (E, d),
// float32 or bfloat16 of one dtype, rows contiguous; the CSRs as cpu.EdgeCSR holds them).
at::Tensor relu_sum(at::Tensor x, at::Tensor ef, double self_weight, at::Tensor dst_indptr, at::Tensor dst_src,
                    at::Tensor dst_eid, at::Tensor src_indptr, at::Tensor src_eid) {
  GPSE_PROFILED("ReluSum");
  return ReluSum::apply(x, ef, self_weight, dst_indptr, dst_src, dst_eid, src_indptr, src_eid);
}

}  // namespace

static const gpse_native::Binding binding([](pybind11::module_& m) {
  m.def("relu_sum", &relu_sum, "w x[v] + sum of relu(x[u] + ef[e]) over each destination's in-edges, with autograd");
});
