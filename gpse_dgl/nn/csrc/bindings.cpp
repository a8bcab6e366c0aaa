// Python bindings of gpse_dgl.nn.native's extension (one module for every source in this folder).
#include "native.h"

#include <torch/extension.h>

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("factors", &gated_sum_factors, "exp(-x) row by row, and a flag per row outside the factorisation's range");
  m.def("forward", &gated_sum_forward, "gated sum, forward (adds into out)");
  m.def("grad_key", &gated_sum_grad_key, "gated sum, gradient of the destination gate");
  m.def("grad_source", &gated_sum_grad_source, "gated sum, gradients of the source gate and value");
  m.def("packed_shape", &gated_sum_packed_shape, "the shape of the slab pack writes (blocks, rows, 2 * lanes)");
  m.def("pack", &gated_sum_pack, "the sources' factors and values packed by column blocks, and their flags");
  m.def("packed_forward", &gated_sum_packed_forward, "gated sum by column blocks of a packed slab (adds into out)");
  m.def("relu_sum_forward", &relu_sum_forward, "sum of relu(x[u] + ef[e]) over each destination's in-edges");
  m.def("relu_sum_grad_edge", &relu_sum_grad_edge, "relu sum, gradient of the edge features (by destination)");
  m.def("relu_sum_grad_source", &relu_sum_grad_source, "relu sum, gradient of the sources (by source)");
  m.def("dropout_noise", &dropout_noise, "dropout noise: 0 or 1 / (1 - p) per element, a function of (seed, index)");
  m.def("residual_forward", &residual_forward, "out = h + normalize(relu(dropout(z))) row by row");
  m.def("residual_backward", &residual_backward, "gradient of z through the residual step");
}
