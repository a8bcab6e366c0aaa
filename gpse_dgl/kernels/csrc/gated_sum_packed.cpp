// The gated sum of gated_sum.cpp by column blocks, for inference on graphs whose rows do not fit in the cache
// (gpse_dgl.kernels.gated_sum_packed, used by layer-wise encoding):
//
//   out[v] += sum_{e = (u, v)} sigmoid(k[v] + q[u]) * val[u]
//
// Why: the row kernel reads two whole source rows per edge (4 KB at d = 512 in float32) in random order. On
// an arXiv-size graph the sources are hundreds of MB, so nearly every edge reads its rows from memory, about
// 11 GB per layer. Here the columns are taken in blocks of one cache line (16 float32 or 32 bfloat16 lanes),
// and a block of each source's gate factors and value is packed into one 128-byte record of a slab (`pack`).
// One block's records of every source (N x 128 bytes: 21.7 MB for 169,343 nodes) can stay in the last-level
// cache while all destinations' edges read them, so memory delivers each record about once per block and
// call instead of once per edge; the index is streamed once per block.
//
// A destination's edges are summed in edge order, lane by lane, with the row kernel's arithmetic and its
// choice between the factored and the direct form (by the rows' flags), and hubs in the same fixed pieces:
// the sums agree with the row kernel's to float rounding (tests: 1e-6), whatever the number of threads.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gated_sum.h"
#include "native.h"

std::vector<int64_t> gated_sum_packed_shape(int64_t n, int64_t d, int64_t element_size);  // below, bound to Python

namespace {

using namespace gated;

// A block of columns: one cache line of a row.
template <typename T>
constexpr int64_t kLanes = 64 / static_cast<int64_t>(sizeof(T));

// Records are read from the cache most of the time, so prefetching runs further ahead than the row kernel's.
constexpr int64_t kRecordsAhead = 16;  // edges

int64_t num_blocks(int64_t d, int64_t lanes) { return (d + lanes - 1) / lanes; }

// Record (b, u) of the slab: [exp(-q[u]) (q[u] itself where u is flagged) | val[u]] over the columns of block b,
// lanes past d zero.
template <typename T>
struct Slab {
  T* data;
  int64_t n;  // sources
  T* block(int64_t b) const { return data + b * n * 2 * kLanes<T>; }
};

template <typename T>
void pack_kernel(Rows<T> q, Rows<T> val, Slab<T> slab, uint8_t* flag, int64_t n, int64_t d) {
  constexpr int64_t W = kLanes<T>;
  const int64_t blocks = num_blocks(d, W);
  at::parallel_for(0, n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const T* qu = q[u];
      const T* vu = val[u];
      const bool flagged = flag[u] = beyond_factor_range(qu, d);
      for (int64_t b = 0; b < blocks; ++b) {
        T* record = slab.block(b) + u * 2 * W;
        const int64_t c = b * W, width = std::min(W, d - c);
        if (flagged) {
          std::copy(qu + c, qu + c + width, record);
        } else {
#pragma omp simd
          for (int64_t j = 0; j < width; ++j) store(record, j, exp_approx(-load(qu, c + j)));
        }
        std::copy(vu + c, vu + c + width, record + W);
        std::fill(record + width, record + W, T(0.0f));
        std::fill(record + W + width, record + 2 * W, T(0.0f));
      }
    }
  });
}

// A destination's key over the lanes of one block (zero past d) and its factors exp(-key).
template <typename T>
inline void load_key_block(const T* k, int64_t width, float* key, float* ek) {
  constexpr int64_t W = kLanes<T>;
  for (int64_t j = 0; j < W; ++j) key[j] = j < width ? load(k, j) : 0.0f;
#pragma omp simd
  for (int64_t j = 0; j < W; ++j) ek[j] = exp_approx(-key[j]);
}

// acc[0:W] += gate * value over the edges [e0, e1) of a destination in block `records` (columns c .. c + width);
// records are prefetched ahead up to edge `prefetch_end`. The forms as the row kernel's add_edges.
template <typename T>
inline void add_block_edges(int64_t e0, int64_t e1, int64_t prefetch_end, const int64_t* index, const T* records,
                            Rows<T> q, int64_t c, int64_t width, const uint8_t* q_flag, const float* key,
                            const float* ek, bool factored, float* acc) {
  constexpr int64_t W = kLanes<T>;
  for (int64_t e = e0; e < e1; ++e) {
    if (e + kRecordsAhead < prefetch_end) {
      const T* ahead = records + index[e + kRecordsAhead] * 2 * W;
      __builtin_prefetch(ahead, 0, 3);
      __builtin_prefetch(ahead + W, 0, 3);
    }
    const int64_t u = index[e];
    const T* record = records + u * 2 * W;
    if (factored && !q_flag[u]) {
#pragma omp simd
      for (int64_t j = 0; j < W; ++j) acc[j] += load(record, W + j) / (1.0f + ek[j] * load(record, j));
    } else if (q_flag[u]) {  // the record holds q itself
#pragma omp simd
      for (int64_t j = 0; j < W; ++j) acc[j] += sigmoid(key[j] + load(record, j)) * load(record, W + j);
    } else {  // a flagged destination: q from its row
      const T* qu = q[u] + c;
      for (int64_t j = 0; j < width; ++j) acc[j] += sigmoid(key[j] + load(qu, j)) * load(record, W + j);
    }
  }
}

// A hub destination (more than kHubEdges in-edges): summed in the row kernel's pieces, each over all blocks.
template <typename T>
void packed_hub(int64_t v, const int64_t* indptr, const int64_t* index, Rows<T> k, Rows<T> q, Slab<T> slab,
                const uint8_t* q_flag, bool factored, OutRows out, int64_t d) {
  constexpr int64_t W = kLanes<T>;
  sum_in_pieces(indptr[v], indptr[v + 1], d, out[v], [&](int64_t a, int64_t z, float* sum) {
    alignas(64) float key[W], ek[W], acc[W];
    for (int64_t b = 0; b < num_blocks(d, W); ++b) {
      const int64_t c = b * W, width = std::min(W, d - c);
      load_key_block(k[v] + c, width, key, ek);
      std::fill(acc, acc + W, 0.0f);
      add_block_edges(a, z, z, index, slab.block(b), q, c, width, q_flag, key, ek, factored, acc);
      std::copy(acc, acc + width, sum + c);
    }
  });
}

template <typename T>
void packed_forward_kernel(const int64_t* indptr, const int64_t* index, Rows<T> k, Rows<T> q, Slab<T> slab,
                           const uint8_t* q_flag, OutRows out, int64_t n, int64_t d) {
  constexpr int64_t W = kLanes<T>;
  const int64_t blocks = num_blocks(d, W);
  // a key row with an entry beyond the factorisation's range takes the direct form on all its edges
  std::vector<uint8_t> factored(n);
  at::parallel_for(0, n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) factored[v] = !beyond_factor_range(k[v], d);
  });
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c = b * W, width = std::min(W, d - c);
    const T* records = slab.block(b);
    at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
      alignas(64) float key[W], ek[W], acc[W];
      const int64_t last_edge = indptr[end];  // prefetching runs on into the next nodes' edges
      for (int64_t v = begin; v < end; ++v) {
        const int64_t e0 = indptr[v], e1 = indptr[v + 1];
        if (e0 == e1 || e1 - e0 > kHubEdges) continue;  // hubs: below
        load_key_block(k[v] + c, width, key, ek);
        std::fill(acc, acc + W, 0.0f);
        add_block_edges(e0, e1, last_edge, index, records, q, c, width, q_flag, key, ek, factored[v], acc);
        float* o = out[v] + c;
        for (int64_t j = 0; j < width; ++j) o[j] += acc[j];
      }
    });
  }
  for (int64_t v = 0; v < n; ++v) {
    if (indptr[v + 1] - indptr[v] > kHubEdges) packed_hub(v, indptr, index, k, q, slab, q_flag, factored[v], out, d);
  }
}

// The CSR is taken from the caller as it is (not built from a graph, as the row kernel's): its offsets must run
// from 0 to the number of edges without decreasing, and its sources must be rows of q, or the sums would read
// outside the slab. One pass over the edges, small next to the sums.
void check_csr_contents(const at::Tensor& indptr, const at::Tensor& index, int64_t n, int64_t n_src) {
  const int64_t* ip = indptr.data_ptr<int64_t>();
  const int64_t* ix = index.data_ptr<int64_t>();
  gpse_native::check(ip[0] == 0 && ip[n] == index.numel(), "indptr must run from 0 to the number of edges (%lld)",
                     static_cast<long long>(index.numel()));
  bool ordered = true, in_range = true;
  for (int64_t v = 0; v < n; ++v) ordered &= ip[v] <= ip[v + 1];
  const int64_t edges = index.numel();
#pragma omp simd reduction(&& : in_range)
  for (int64_t e = 0; e < edges; ++e) in_range = in_range && ix[e] >= 0 && ix[e] < n_src;
  TORCH_CHECK(ordered, "indptr must not decrease");
  gpse_native::check(in_range, "every source index must be in [0, %lld)", static_cast<long long>(n_src));
}

void check_slab(const at::Tensor& slab, const at::Tensor& q) {
  const auto shape = gated_sum_packed_shape(q.size(0), q.size(1), q.element_size());
  gpse_native::check(slab.is_contiguous() && slab.scalar_type() == q.scalar_type() && slab.sizes() == shape,
                     "the slab must be contiguous, of q's dtype and of shape (%lld, %lld, %lld)",
                     static_cast<long long>(shape[0]), static_cast<long long>(shape[1]),
                     static_cast<long long>(shape[2]));
}

}  // namespace

// (blocks, n, 2 * lanes): the slab of n source rows of width d whose elements take element_size bytes.
std::vector<int64_t> gated_sum_packed_shape(int64_t n, int64_t d, int64_t element_size) {
  gpse_native::check(element_size == 2 || element_size == 4,
                     "rows of 2 or 4 bytes an element (bf16, float32), not %lld", static_cast<long long>(element_size));
  const int64_t lanes = 64 / element_size;
  return {num_blocks(d, lanes), n, 2 * lanes};
}

// slab = the records of q's factors and val (see above), flag[u] = 1 where q's row u is beyond the factors' range.
void gated_sum_pack(at::Tensor q, at::Tensor val, at::Tensor slab, at::Tensor flag) {
  const int64_t n = q.size(0), d = q.size(1);
  check_rows(q, "q", d);
  check_rows(val, "val", d);
  TORCH_CHECK(val.scalar_type() == q.scalar_type() && val.size(0) == n, "q, val: one dtype, one row per source");
  check_slab(slab, q);
  TORCH_CHECK(flag.is_contiguous() && flag.scalar_type() == at::kByte && flag.numel() == n, "flags: one uint8 per row");
  dispatch(q, [&](auto tag) {
    using T = decltype(tag);
    pack_kernel<T>(rows<T>(q), rows<T>(val), Slab<T>{slab.data_ptr<T>(), n}, flag.data_ptr<uint8_t>(), n, d);
  });
}

// out (float32, (n_dst, d), contiguous rows) += the gated sum; k: (n_dst, d); q: (n_src, d), the rows the slab and
// its flags were packed from; indptr/index: CSR by destination. k, q and out may be column slices of wider tensors.
void gated_sum_packed_forward(at::Tensor indptr, at::Tensor index, at::Tensor k, at::Tensor q, at::Tensor slab,
                              at::Tensor q_flag, at::Tensor out) {
  const int64_t n = out.size(0), d = out.size(1);
  check_csr(indptr, index, n);
  check_rows(k, "k", d);
  check_rows(q, "q", d);
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && k.size(0) == n, "k: q's dtype, one row per destination");
  check_slab(slab, q);
  TORCH_CHECK(q_flag.is_contiguous() && q_flag.scalar_type() == at::kByte && q_flag.numel() == q.size(0),
              "flags: one uint8 per source");
  TORCH_CHECK(out.scalar_type() == at::kFloat && out.dim() == 2 && out.stride(1) == 1 && out.stride(0) >= d,
              "out must be float32 with contiguous rows that do not overlap");
  check_csr_contents(indptr, index, n, q.size(0));
  dispatch(k, [&](auto tag) {
    using T = decltype(tag);
    packed_forward_kernel<T>(indptr.data_ptr<int64_t>(), index.data_ptr<int64_t>(), rows<T>(k), rows<T>(q),
                             Slab<T>{slab.data_ptr<T>(), q.size(0)}, q_flag.data_ptr<uint8_t>(),
                             OutRows{out.data_ptr<float>(), out.stride(0)}, n, d);
  });
}

static const gpse_native::Binding binding([](pybind11::module_& m) {
  m.def("gated_sum_packed_shape", &gated_sum_packed_shape,
        "the shape of the slab gated_sum_pack writes (blocks, rows, 2 * lanes)");
  m.def("gated_sum_pack", &gated_sum_pack, "the sources' factors and values packed by column blocks, and their flags");
  m.def("gated_sum_packed_forward", &gated_sum_packed_forward,
        "gated sum by column blocks of a packed slab (adds into out)");
});
