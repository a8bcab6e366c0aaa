// What every source of gpse_dgl.kernels.cpu's extension shares: its checks, and how it binds its entry points.
#pragma once

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/extension.h>

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

// A scope torch.profiler lists under `name` (an entry point called from Python is no dispatcher op, so without it
// the profiler counts the kernel's forward as time outside every op); one flag test when no profiler runs.
#define GPSE_PROFILED(name) RECORD_FUNCTION(name, std::vector<c10::IValue>())

// Each source binds its own entry points, so that a new kernel is one source file: at its end,
//
//   static const gpse_native::Binding binding([](pybind11::module_& m) { m.def("name", &function, "doc"); });
//
// adds them to the one module bindings.cpp defines (when the library is loaded, before the module is made).
using Binder = void (*)(pybind11::module_&);

inline std::vector<Binder>& binders() {
  static std::vector<Binder> all;
  return all;
}

struct Binding {
  explicit Binding(Binder bind) { binders().push_back(bind); }
};

}  // namespace gpse_native
