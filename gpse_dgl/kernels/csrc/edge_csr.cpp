// A graph's edges in the two CSR layouts the neighbour-sum kernels read (relu_sum.cpp, edge_gated_sum.cpp,
// u_sum.cpp), by one counting sort per direction: O(E + n), stable (edge-id order within a node), where torch's
// argsort, bincount, cumsum and gathers take several passes and a sort. Built once per graph (EdgeCSR in csr.py),
// before the first layer of every training step, so its cost is part of each step.
#include "edge_csr.h"

namespace {

// (indptr (n + 1), order (E)): the edges e with key[e] == v are order[indptr[v]:indptr[v + 1]], in edge-id order.
std::pair<at::Tensor, at::Tensor> counting_sort(const int64_t* key, int64_t num_edges, int64_t n, const char* name) {
  at::Tensor indptr = at::zeros({n + 1}, at::kLong);
  at::Tensor order = at::empty({num_edges}, at::kLong);
  int64_t* ptr = indptr.data_ptr<int64_t>();
  int64_t* out = order.data_ptr<int64_t>();
  for (int64_t e = 0; e < num_edges; ++e) {
    gpse_native::check(key[e] >= 0 && key[e] < n, "edge %lld: %s node %lld is not below %lld",
                       static_cast<long long>(e), name, static_cast<long long>(key[e]), static_cast<long long>(n));
    ++ptr[key[e] + 1];
  }
  for (int64_t v = 0; v < n; ++v) ptr[v + 1] += ptr[v];
  std::vector<int64_t> next(ptr, ptr + n);
  for (int64_t e = 0; e < num_edges; ++e) out[next[key[e]]++] = e;
  return {indptr, order};
}

// The arrays of graph_csr::EdgeCsr, in the order of its fields: the in-edges of each destination (their sources and
// edge ids) and the out-edges of each source (their destinations and edge ids); src and dst int64 on the CPU.
std::vector<at::Tensor> edge_csr(at::Tensor src, at::Tensor dst, int64_t num_src, int64_t num_dst) {
  GPSE_PROFILED("EdgeCSR");
  gpse_native::check(src.scalar_type() == at::kLong && dst.scalar_type() == at::kLong && src.dim() == 1 &&
                         src.sizes() == dst.sizes() && src.device().is_cpu() && dst.device().is_cpu(),
                     "src and dst must be 1-D int64 CPU tensors of one length");
  src = src.contiguous();
  dst = dst.contiguous();
  const int64_t num_edges = src.numel();
  const int64_t* s = src.data_ptr<int64_t>();
  const int64_t* d = dst.data_ptr<int64_t>();
  auto [dst_indptr, dst_eid] = counting_sort(d, num_edges, num_dst, "destination");
  auto [src_indptr, src_eid] = counting_sort(s, num_edges, num_src, "source");
  at::Tensor dst_src = at::empty({num_edges}, at::kLong), src_dst = at::empty({num_edges}, at::kLong);
  const int64_t* by_dst = dst_eid.data_ptr<int64_t>();
  const int64_t* by_src = src_eid.data_ptr<int64_t>();
  int64_t* ds = dst_src.data_ptr<int64_t>();
  int64_t* sd = src_dst.data_ptr<int64_t>();
  for (int64_t i = 0; i < num_edges; ++i) {
    ds[i] = s[by_dst[i]];
    sd[i] = d[by_src[i]];
  }
  return graph_csr::EdgeCsr{dst_indptr, dst_src, dst_eid, src_indptr, src_dst, src_eid}.arrays();
}

}  // namespace

static const gpse_native::Binding binding([](pybind11::module_& m) {
  m.def("edge_csr", &edge_csr, "in-edges by destination and out-edges by source, stable counting sorts");
});
