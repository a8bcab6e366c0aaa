// The entry points of gpse_dgl.nn.native's extension, bound to Python in bindings.cpp.
#pragma once

#include <ATen/ATen.h>

#include <cstdarg>
#include <cstdio>
#include <vector>

namespace gpse_native {

// TORCH_CHECK with a printf-style message, raised through TORCH_CHECK's `const char*` overload. A message of
// several parts (TORCH_CHECK(ok, name, " must be ", d)) goes through c10::str and a std::string instead, and
// with torch 2.11's CUDA wheels and the system's g++ 13 that crashed the process (SIGSEGV) instead of raising.
[[gnu::format(printf, 2, 3)]] inline void check(bool ok, const char* format, ...) {
  if (ok) return;
  char message[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof message, format, args);
  va_end(args);
  TORCH_CHECK(false, static_cast<const char*>(message));
}

}  // namespace gpse_native

// gated_sum.cpp: the fused gated aggregation and its gradients
void gated_sum_factors(at::Tensor x, at::Tensor factor, at::Tensor flag);
void gated_sum_forward(at::Tensor indptr, at::Tensor index, at::Tensor k, at::Tensor q, at::Tensor val,
                       at::Tensor eq, at::Tensor q_flag, at::Tensor out);
void gated_sum_grad_key(at::Tensor indptr, at::Tensor index, at::Tensor k, at::Tensor q, at::Tensor val,
                        at::Tensor eq, at::Tensor q_flag, at::Tensor grad_out, at::Tensor grad_k);
void gated_sum_grad_source(at::Tensor indptr, at::Tensor index, at::Tensor k, at::Tensor q, at::Tensor val,
                           at::Tensor ek, at::Tensor k_flag, at::Tensor grad_out, at::Tensor grad_q,
                           at::Tensor grad_val);

// gated_sum_packed.cpp: the gated sum by column blocks of a packed slab, for inference on large graphs
std::vector<int64_t> gated_sum_packed_shape(int64_t n, int64_t d, int64_t element_size);
void gated_sum_pack(at::Tensor q, at::Tensor val, at::Tensor slab, at::Tensor flag);
void gated_sum_packed_forward(at::Tensor indptr, at::Tensor index, at::Tensor k, at::Tensor q, at::Tensor slab,
                              at::Tensor q_flag, at::Tensor out);

// relu_sum.cpp: GINE's aggregation sum_{e = (u, v)} relu(x[u] + ef[e]) and its gradients
void relu_sum_forward(at::Tensor indptr, at::Tensor src, at::Tensor eid, at::Tensor x, at::Tensor ef, at::Tensor out);
void relu_sum_grad_edge(at::Tensor indptr, at::Tensor src, at::Tensor eid, at::Tensor x, at::Tensor ef,
                        at::Tensor grad_out, at::Tensor grad_ef);
void relu_sum_grad_source(at::Tensor indptr, at::Tensor eid, at::Tensor grad_ef, at::Tensor grad_x);

// dropout.cpp: dropout noise from a counter-based generator
void dropout_noise(int64_t seed, double p, at::Tensor out);

// residual.cpp: the encoder's residual step h + normalize(relu(dropout(z))) and its gradient
void residual_forward(at::Tensor z, at::Tensor h, int64_t seed, double p, double eps, at::Tensor y, at::Tensor norm,
                      at::Tensor out);
void residual_backward(at::Tensor y, at::Tensor norm, at::Tensor grad_out, double p, double eps, at::Tensor grad_z);
