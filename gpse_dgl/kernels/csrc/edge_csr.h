// A graph's edges in the two CSR layouts the neighbour-sum kernels read (relu_sum.cpp, edge_gated_sum.cpp,
// u_sum.cpp): the in-edges of each destination (their sources and edge ids) and the out-edges of each source
// (their destinations and edge ids), int64 on the CPU. edge_csr (edge_csr.cpp) returns the six arrays as a list in
// the order of EdgeCsr's fields, csr.EdgeCSR keeps that list, and every kernel takes it whole and reads it here by
// name: the arrays are all int64 of one length, so two kernels reading them in different orders would pass every
// check and sum the wrong rows.
#pragma once

#include <vector>

#include "native.h"

namespace graph_csr {

struct EdgeCsr {
  at::Tensor dst_indptr, dst_src, dst_eid, src_indptr, src_dst, src_eid;

  static constexpr size_t kArrays = 6;

  // The arrays at list[first:first + 6] (a kernel's argument, or its saved variables after its own: after()).
  static EdgeCsr from(const std::vector<at::Tensor>& list, size_t first = 0) {
    gpse_native::check(list.size() >= first + kArrays, "an edge CSR is %d arrays", static_cast<int>(kArrays));
    return {list[first], list[first + 1], list[first + 2], list[first + 3], list[first + 4], list[first + 5]};
  }

  std::vector<at::Tensor> arrays() const { return {dst_indptr, dst_src, dst_eid, src_indptr, src_dst, src_eid}; }

  // `head` with the arrays after it: what a kernel saves for backward, read back with from(saved, head.size()).
  std::vector<at::Tensor> after(std::vector<at::Tensor> head) const {
    const std::vector<at::Tensor> own = arrays();
    head.insert(head.end(), own.begin(), own.end());
    return head;
  }

  int64_t num_dst() const { return dst_indptr.numel() - 1; }
  int64_t num_src() const { return src_indptr.numel() - 1; }
};

}  // namespace graph_csr
