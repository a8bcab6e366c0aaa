// GIN's aggregation out[v] = w x[v] + sum_{u -> v} x[u] (and GCN's, w = 0), or GraphSAGE's mean (the sum over v's
// in-degree, 0 without in-edges), and its gradient, without an (E, d) message: forward by destination (CSR of the
// in-edges' sources), each edge reading x[u] once into a float32 row held while its destination is summed; backward
// by source (CSR of the out-edges' destinations), grad_x[u] = w grad_out[u] + the sum of grad_out (for the mean:
// grad_out[v] / deg(v)) over u's out-edges, no atomics.
// The autograd function (USum, bound as `u_sum`) is C++'s own: no Python runs forward or backward.
// Rows are float32 or bfloat16; every sum is float32 and runs over a node's edges in edge-id order on one thread,
// so the result does not depend on the number of threads.
#include "edge_csr.h"
#include "rows.h"
#include "node_sums.h"

namespace {

using gpse_native::load;
using gpse_native::Rows;

// out[v] (float32) = w x[v] + sum of x[index[e]] over v's in-edges [indptr[v], indptr[v + 1]) (index: their
// sources), for v < n; the self term only where w != 0; with `mean`, that divided by v's in-degree (if any).
template <typename T>
void sum_kernel(const int64_t* indptr, const int64_t* index, Rows<T> x, float self_weight, bool mean, float* out,
                int64_t n, int64_t d) {
  at::parallel_for(0, n, gpse_native::kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      float* acc = out + v * d;
      node_sums::start_with_self_term(acc, x[v], self_weight, d);
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
        if (e + gpse_native::kPrefetchAhead < indptr[v + 1]) gpse_native::prefetch_row(x[index[e + gpse_native::kPrefetchAhead]], d);
        const T* xu = x[index[e]];
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) acc[j] += load(xu, j);
      }
      const int64_t degree = indptr[v + 1] - indptr[v];
      if (mean && degree > 1) {
        const float divisor = static_cast<float>(degree);
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) acc[j] /= divisor;
      }
    }
  });
}

struct USum : public torch::autograd::Function<USum> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, double self_weight, bool mean,
                            std::vector<at::Tensor> csr) {
    const graph_csr::EdgeCsr g = graph_csr::EdgeCsr::from(csr);
    const int64_t n = g.num_dst(), d = x.size(1);
    gpse_native::check_csr(g.dst_indptr, g.dst_src, n);
    gpse_native::check_csr(g.src_indptr, g.src_dst, g.num_src());
    gpse_native::check_rows(x, "x", d);
    gpse_native::check(g.num_src() == x.size(0), "one source CSR row per row of x");
    gpse_native::check(self_weight == 0.0 || n <= x.size(0), "the self term needs a row of x per destination");
    gpse_native::check(self_weight == 0.0 || !mean, "the mean takes no self term");
    at::Tensor out = at::empty({n, d}, x.options().dtype(at::kFloat));
    gpse_native::dispatch(x, [&](auto tag) {
      using T = decltype(tag);
      sum_kernel<T>(g.dst_indptr.data_ptr<int64_t>(), g.dst_src.data_ptr<int64_t>(), gpse_native::rows<T>(x),
                    static_cast<float>(self_weight), mean, out.data_ptr<float>(), n, d);
    });
    // the mean's backward divides grad_out by the in-degrees (at least 1), as the forward pass divided the sums
    const at::Tensor divisors =
        mean ? (g.dst_indptr.slice(0, 1) - g.dst_indptr.slice(0, 0, n)).clamp_min(1).to(at::kFloat) : at::Tensor();
    ctx->save_for_backward({g.src_indptr, g.src_dst, divisors});
    ctx->saved_data["self_weight"] = self_weight;
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["rows"] = x.size(0);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    at::Tensor grad_out = grads[0].to(at::kFloat).contiguous();
    if (saved[2].defined()) grad_out = (grad_out / saved[2].unsqueeze(1)).contiguous();
    const int64_t rows = ctx->saved_data["rows"].toInt(), d = grad_out.size(1);
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    at::Tensor grad_x = at::empty({rows, d}, grad_out.options().dtype(dtype));
    gpse_native::dispatch(grad_x, [&](auto tag) {
      using T = decltype(tag);
      // the sum over grad_out by source; sources without a destination row (u >= n_dst) take no self term
      node_sums::sum_by_node<T>(saved[0].data_ptr<int64_t>(), saved[1].data_ptr<int64_t>(), grad_out.data_ptr<float>(),
                                grad_out.data_ptr<float>(), static_cast<float>(ctx->saved_data["self_weight"].toDouble()),
                                grad_out.size(0), grad_x.data_ptr<T>(), rows, d);
    });
    return {grad_x, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// out (float32, (n_dst, d)) = self_weight * x[:n_dst] + the sum over each destination's in-edges of x[u] (with
// `mean`: that sum over the in-degree, no self term), with autograd (x: (n_src, d), float32 or bfloat16, rows
// contiguous; csr: the arrays of edge_csr, as csr.EdgeCSR holds them).
at::Tensor u_sum(at::Tensor x, double self_weight, bool mean, std::vector<at::Tensor> csr) {
  GPSE_PROFILED("USum");
  return USum::apply(x, self_weight, mean, csr);
}

}  // namespace

static const gpse_native::Binding binding([](pybind11::module_& m) {
  m.def("u_sum", &u_sum, "w x[v] + the sum (or the mean) of x[u] over each destination's in-edges, with autograd");
});
