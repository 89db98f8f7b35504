// XLA FFI handlers for the JAX backend on a CPU: the skinny products of
// skinny_products.c (the NumPy backend's kernels) called from inside a
// compiled program (tempo/runtime/backends/jax_native.py).
//
// tempo_panel_product: out (count, rows, width) = x (rows, k) @ panels[p]
// (k, width) for each of `count` column panels of a weight matrix
// (tempo/transforms/pack_weights.py), each panel read once, front to back.
#include <cstdint>

#include "xla/ffi/api/ffi.h"

extern "C" {
#include "skinny_products.c"
}

namespace ffi = xla::ffi;

static ffi::Error PanelProduct(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> panels,
                               ffi::ResultBuffer<ffi::F32> out) {
  const auto dims = panels.dimensions();
  if (dims.size() != 3) return ffi::Error::InvalidArgument("tempo_panel_product: panels of rank 3 expected");
  const int64_t count = dims[0], k = dims[1], width = dims[2];
  const int64_t rows = static_cast<int64_t>(x.element_count()) / k;
  few_rows(x.typed_data(), k, 0, panels.typed_data(), width, k * width, out->typed_data(), rows * width, count, rows,
           k, width);
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(tempo_panel_product, PanelProduct,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
