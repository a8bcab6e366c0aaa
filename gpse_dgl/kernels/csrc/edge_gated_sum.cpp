// GatedGCN's aggregation with edge gates (Bresson & Laurent 2017, GraphGPS's GatedGCNLayer) and its gradients,
// without a per-edge gate or message tensor besides the gate logits the layer returns:
//
//   logit[e] = dg[v] + sg[u] + eg[e]                                  for every edge e = (u, v)
//   out[v]   = sum_e sigmoid(logit[e]) * val[u] / (sum_e sigmoid(logit[e]) + eps)
//
// Forward: by destination (CSR of the in-edges: their sources and edge ids), one pass; each edge reads sg[u],
// eg[e] and val[u] once, writes its logit row (float32) and adds its gate and message to float32 rows held while
// its destination is summed. `den[v] + eps` is kept for the backward pass.
// Backward, two passes and no atomics, the gates recomputed from the logits:
//   1. by destination: with q[v] = grad_out[v] / (den[v] + eps) and r[v] = -q[v] * out[v],
//      grad_logit[e] = (q[v] * val[u] + r[v]) * s (1 - s) + grad_logit_in[e]   (s = sigmoid(logit[e]))
//      and grad_dg[v] = the sum of grad_logit over v's in-edges; q is written for pass 2;
//   2. by source (CSR of the out-edges: their edge ids and destinations): grad_sg[u] = the sum of grad_logit[e],
//      grad_val[u] = the sum of q[v] * s over u's out-edges.
// grad_eg is grad_logit itself. The autograd function (EdgeGatedSum, bound as `edge_gated_sum`) is C++'s own: no
// Python runs between the passes.
// Rows are float32 or bfloat16 (one dtype; a column slice of a wider projection too); logits, gates and every
// sum are float32, and each node's edges are summed in edge-id order on one thread, so the result does not depend
// on the number of threads.
#include "edge_csr.h"
#include "gated_sum.h"  // the gate: gated::sigmoid
#include "rows.h"

namespace {

using gpse_native::load;
using gpse_native::Rows;
using gated::sigmoid;
using gpse_native::store;

using graph_csr::EdgeCsr;

template <typename T>
void forward_kernel(const EdgeCsr& g, Rows<T> val, Rows<T> dg, Rows<T> sg, Rows<T> eg, float eps, float* out,
                    float* den, float* logits, int64_t n, int64_t d) {
  const int64_t* indptr = g.dst_indptr.data_ptr<int64_t>();
  const int64_t* src = g.dst_src.data_ptr<int64_t>();
  const int64_t* eid = g.dst_eid.data_ptr<int64_t>();
  at::parallel_for(0, n, gpse_native::kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      float* num = out + v * d;
      float* sum = den + v * d;
      std::fill(num, num + d, 0.0f);
      std::fill(sum, sum + d, 0.0f);
      const T* dv = dg[v];
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
        if (e + gpse_native::kPrefetchAhead < indptr[v + 1]) {
          gpse_native::prefetch_row(sg[src[e + gpse_native::kPrefetchAhead]], d);
          gpse_native::prefetch_row(val[src[e + gpse_native::kPrefetchAhead]], d);
        }
        const T* su = sg[src[e]];
        const T* vu = val[src[e]];
        const T* ge = eg[eid[e]];
        float* le = logits + eid[e] * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {
          const float logit = load(dv, j) + load(su, j) + load(ge, j);
          const float s = sigmoid(logit);
          le[j] = logit;
          num[j] += s * load(vu, j);
          sum[j] += s;
        }
      }
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {
        sum[j] += eps;
        num[j] /= sum[j];
      }
    }
  });
}

// Pass 1: grad_logit (float32, (E, d)), grad_dg (T, (n, d)) and q (float32, (n, d)).
template <typename T>
void grad_destination_kernel(const EdgeCsr& g, Rows<T> val, const float* out, const float* den, const float* logits,
                             const float* grad_out, const float* grad_logit_in, float* grad_logit, float* q,
                             T* grad_dg, int64_t n, int64_t d) {
  const int64_t* indptr = g.dst_indptr.data_ptr<int64_t>();
  const int64_t* src = g.dst_src.data_ptr<int64_t>();
  const int64_t* eid = g.dst_eid.data_ptr<int64_t>();
  at::parallel_for(0, n, gpse_native::kGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> r(d), acc(d);
    for (int64_t v = begin; v < end; ++v) {
      float* qv = q + v * d;
      const float* ov = out + v * d;
      const float* dv = den + v * d;
      if (grad_out != nullptr) {
        const float* go = grad_out + v * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {
          qv[j] = go[j] / dv[j];
          r[j] = -qv[j] * ov[j];
        }
      } else {
        std::fill(qv, qv + d, 0.0f);
        std::fill(r.begin(), r.end(), 0.0f);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
        const T* vu = val[src[e]];
        const float* le = logits + eid[e] * d;
        float* gl = grad_logit + eid[e] * d;
        const float* gin = grad_logit_in != nullptr ? grad_logit_in + eid[e] * d : nullptr;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {
          const float s = sigmoid(le[j]);
          float grad = (qv[j] * load(vu, j) + r[j]) * s * (1.0f - s);
          if (gin != nullptr) grad += gin[j];
          gl[j] = grad;
          acc[j] += grad;
        }
      }
      T* gd = grad_dg + v * d;
      for (int64_t j = 0; j < d; ++j) store(gd, j, acc[j]);
    }
  });
}

// Pass 2: grad_sg and grad_val (T, (n_src, d)), every row written.
template <typename T>
void grad_source_kernel(const EdgeCsr& g, const float* logits, const float* grad_logit, const float* q, T* grad_sg,
                        T* grad_val, int64_t n, int64_t d) {
  const int64_t* indptr = g.src_indptr.data_ptr<int64_t>();
  const int64_t* eid = g.src_eid.data_ptr<int64_t>();
  const int64_t* dst = g.src_dst.data_ptr<int64_t>();
  at::parallel_for(0, n, gpse_native::kGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> acc_s(d), acc_v(d);
    for (int64_t u = begin; u < end; ++u) {
      std::fill(acc_s.begin(), acc_s.end(), 0.0f);
      std::fill(acc_v.begin(), acc_v.end(), 0.0f);
      for (int64_t e = indptr[u]; e < indptr[u + 1]; ++e) {
        const float* gl = grad_logit + eid[e] * d;
        const float* le = logits + eid[e] * d;
        const float* qv = q + dst[e] * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {
          acc_s[j] += gl[j];
          acc_v[j] += qv[j] * sigmoid(le[j]);
        }
      }
      T* gs = grad_sg + u * d;
      T* gv = grad_val + u * d;
      for (int64_t j = 0; j < d; ++j) {
        store(gs, j, acc_s[j]);
        store(gv, j, acc_v[j]);
      }
    }
  });
}

void check_inputs(const EdgeCsr& g, const at::Tensor& val, const at::Tensor& dg, const at::Tensor& sg,
                  const at::Tensor& eg) {
  const int64_t n_dst = g.num_dst(), n_src = g.num_src(), d = val.size(1);
  gpse_native::check_csr(g.dst_indptr, g.dst_src, n_dst);
  gpse_native::check_csr(g.dst_indptr, g.dst_eid, n_dst);
  gpse_native::check_csr(g.src_indptr, g.src_eid, n_src);
  gpse_native::check_csr(g.src_indptr, g.src_dst, n_src);
  gpse_native::check_rows(val, "src_feat", d);
  gpse_native::check_rows(dg, "dst_gate", d);
  gpse_native::check_rows(sg, "src_gate", d);
  gpse_native::check_rows(eg, "edge_gate", d);
  TORCH_CHECK(val.scalar_type() == dg.scalar_type() && dg.scalar_type() == sg.scalar_type() &&
                  sg.scalar_type() == eg.scalar_type(),
              "src_feat, dst_gate, src_gate, edge_gate: one dtype");
  gpse_native::check(val.size(0) == n_src && sg.size(0) == n_src && dg.size(0) == n_dst &&
                         eg.size(0) == g.dst_eid.numel() && g.src_eid.numel() == eg.size(0),
                     "rows: src_feat and src_gate one per source, dst_gate one per destination, "
                     "edge_gate one per edge");
}

struct EdgeGatedSum : public torch::autograd::Function<EdgeGatedSum> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::Tensor val,
                                                at::Tensor dg, at::Tensor sg, at::Tensor eg, double eps,
                                                std::vector<at::Tensor> csr) {
    const EdgeCsr g = EdgeCsr::from(csr);
    check_inputs(g, val, dg, sg, eg);
    const int64_t n = g.num_dst(), d = val.size(1);
    const auto floats = val.options().dtype(at::kFloat);
    at::Tensor out = at::empty({n, d}, floats), den = at::empty({n, d}, floats);
    at::Tensor logits = at::empty({eg.size(0), d}, floats);
    gpse_native::dispatch(val, [&](auto tag) {
      using T = decltype(tag);
      forward_kernel<T>(g, gpse_native::rows<T>(val), gpse_native::rows<T>(dg), gpse_native::rows<T>(sg),
                        gpse_native::rows<T>(eg), static_cast<float>(eps), out.data_ptr<float>(),
                        den.data_ptr<float>(), logits.data_ptr<float>(), n, d);
    });
    ctx->save_for_backward(g.after({val, out, den, logits}));
    ctx->saved_data["dtype"] = static_cast<int64_t>(dg.scalar_type());
    return {out, logits};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &val = saved[0], &out = saved[1], &den = saved[2], &logits = saved[3];
    const EdgeCsr g = EdgeCsr::from(saved, 4);
    const int64_t n_dst = out.size(0), n_src = val.size(0), d = val.size(1);
    const at::Tensor grad_out = grads[0].defined() ? grads[0].to(at::kFloat).contiguous() : at::Tensor();
    const at::Tensor grad_in = grads[1].defined() ? grads[1].to(at::kFloat).contiguous() : at::Tensor();
    at::Tensor grad_logit = at::empty_like(logits), q = at::empty_like(out);
    const auto rows = val.options().memory_format(at::MemoryFormat::Contiguous);
    at::Tensor grad_dg = at::empty({n_dst, d}, rows), grad_sg = at::empty({n_src, d}, rows);
    at::Tensor grad_val = at::empty({n_src, d}, rows);
    gpse_native::dispatch(val, [&](auto tag) {
      using T = decltype(tag);
      grad_destination_kernel<T>(g, gpse_native::rows<T>(val), out.data_ptr<float>(), den.data_ptr<float>(),
                                 logits.data_ptr<float>(), grad_out.defined() ? grad_out.data_ptr<float>() : nullptr,
                                 grad_in.defined() ? grad_in.data_ptr<float>() : nullptr, grad_logit.data_ptr<float>(),
                                 q.data_ptr<float>(), grad_dg.data_ptr<T>(), n_dst, d);
      grad_source_kernel<T>(g, logits.data_ptr<float>(), grad_logit.data_ptr<float>(), q.data_ptr<float>(),
                            grad_sg.data_ptr<T>(), grad_val.data_ptr<T>(), n_src, d);
    });
    const auto edge_dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad_val, grad_dg, grad_sg, grad_logit.to(edge_dtype), at::Tensor(), at::Tensor()};
  }
};

// (out (n_dst, d), logits (E, d)), both float32, with autograd; src_feat and src_gate: (n_src, d), dst_gate:
// (n_dst, d), edge_gate: (E, d), one dtype (float32 or bfloat16), rows contiguous; csr: the arrays of edge_csr, as
// csr.EdgeCSR holds them.
std::vector<at::Tensor> edge_gated_sum(at::Tensor src_feat, at::Tensor dst_gate, at::Tensor src_gate,
                                       at::Tensor edge_gate, double eps, std::vector<at::Tensor> csr) {
  GPSE_PROFILED("EdgeGatedSum");
  return EdgeGatedSum::apply(src_feat, dst_gate, src_gate, edge_gate, eps, csr);
}

}  // namespace

static const gpse_native::Binding binding([](pybind11::module_& m) {
  m.def("edge_gated_sum", &edge_gated_sum,
        "GatedGCN's gated mean with edge gates, and the gate logits, with autograd");
});
