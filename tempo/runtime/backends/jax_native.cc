// XLA FFI handlers for the JAX backend on a CPU: the skinny products of
// skinny_products.c (the NumPy backend's kernels) called from inside a
// compiled program (tempo/runtime/backends/jax_native.py).
//
// tempo_panel_product: out (count, rows, width) = x (rows, k) @ panels[p]
// (k, width) for each of `count` column panels of a weight matrix
// (tempo/transforms/pack_weights.py), each panel read once, front to back.
//
// tempo_stacked_few_rows: out[p] (rows, width) = x[p] (rows, k) @ b[p] (k,
// width) for `count` matrices b[p] read where they lie in a larger array (a
// K/V buffer of (positions, batch, heads, head size): one head's values),
// row i of b[p] at b + p * stride_b + i * ldb; x and out C-ordered.
//
// tempo_stacked_few_columns: out[p] (rows, cols) = a[p] (rows, k) @ b[p] (k,
// cols), a[p]'s row r at a + p * stride_a + r * lda (one head's keys in the
// buffer), b and out C-ordered, cols at most 4.
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

static ffi::Error StackedFewRows(ffi::Buffer<ffi::F32> x, ffi::AnyBuffer b, ffi::ResultBuffer<ffi::F32> out,
                                 int64_t ldb, int64_t stride_b) {
  const auto dims = out->dimensions();
  const int64_t count = dims[0], rows = dims[1], width = dims[2];
  const int64_t k = x.dimensions()[2];
  few_rows(x.typed_data(), k, rows * k, static_cast<const float *>(b.untyped_data()), ldb, stride_b,
           out->typed_data(), rows * width, count, rows, k, width);
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(tempo_stacked_few_rows, StackedFewRows,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("ldb")
                                  .Attr<int64_t>("stride_b"));

static ffi::Error StackedFewColumns(ffi::AnyBuffer a, ffi::Buffer<ffi::F32> b, ffi::ResultBuffer<ffi::F32> out,
                                    int64_t lda, int64_t stride_a) {
  const auto dims = out->dimensions();
  const int64_t count = dims[0], rows = dims[1], cols = dims[2];
  const int64_t k = b.dimensions()[1];
  few_columns(static_cast<const float *>(a.untyped_data()), lda, stride_a, b.typed_data(), k * cols,
              out->typed_data(), rows * cols, count, rows, k, cols);
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(tempo_stacked_few_columns, StackedFewColumns,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("lda")
                                  .Attr<int64_t>("stride_a"));
