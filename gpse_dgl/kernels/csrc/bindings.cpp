// The Python module of gpse_dgl.kernels.cpu's extension: one module for every source in this folder, each of
// which binds its own entry points (gpse_native::Binding in native.h).
#include "native.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  for (gpse_native::Binder bind : gpse_native::binders()) bind(m);
}
