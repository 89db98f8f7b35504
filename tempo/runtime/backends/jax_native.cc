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
// buffer), b and out C-ordered, cols at most 4: every product in one call of
// few_columns per run of rows kept (for heads of up to 64 floats, each
// product's columns held in registers), as the NumPy backend calls it.
//
// Each takes `rows`, a mask over the large side's rows (few_rows: b[p]'s k
// rows; few_columns: a[p]'s rows), and `fill`: the product of the large side
// with the rows the mask leaves out set to `fill`, those rows never read (their
// part is fill times a sum of the small side's). A K/V buffer masked to the
// rows written so far is read up to the current position.
//
// tempo_attend_steps: a decoding step's attention for every (sequence, head)
// pair in one call of attend_steps (numpy_attention.c, the NumPy backend's):
// the queries q (batch, heads, groups, head size) against one or more parts of
// keys and values (a K/V buffer, the prompt's), one softmax over all of them,
// each pair's scores kept in the cache between the keys' pass and the values'.
// Each part is three operands: its keys and values, each read where it lies
// (strides in the attribute `strides`, per part: the keys' along the sequence,
// head and row axes, then the values'), and a mask over its rows whose kept
// rows are one run (the caller checks): only that run is read.
#include <cstdint>
#include <cstring>
#include <vector>

#include "xla/ffi/api/ffi.h"

extern "C" {
#include "skinny_products.c"
#include "numpy_attention.c"
}

namespace ffi = xla::ffi;

constexpr int64_t kMaxWidth = 64;  // columns of few_rows' matrices (rows_case's widest)

static ffi::Error PanelProduct(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> panels,
                               ffi::ResultBuffer<ffi::F32> out) {
  const auto dims = panels.dimensions();
  if (dims.size() != 3) return ffi::Error::InvalidArgument("tempo_panel_product: panels of rank 3 expected");
  const int64_t count = dims[0], k = dims[1], width = dims[2];
  const int64_t rows = static_cast<int64_t>(x.element_count()) / k;
  few_rows(x.typed_data(), k, 0, panels.typed_data(), width, k * width, out->typed_data(), width, rows * width, count,
           rows, k, width);
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(tempo_panel_product, PanelProduct,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

/* The next run of rows whose mask is `kept` from `at` on: [*start, *stop), false where there is none. */
static bool next_run(const bool *mask, int64_t count, int64_t at, int64_t *start, int64_t *stop,
                     bool kept = true) {
  while (at < count && mask[at] != kept) at++;
  if (at == count) return false;
  *start = at;
  while (at < count && mask[at] == kept) at++;
  *stop = at;
  return true;
}

static ffi::Error StackedFewRows(ffi::Buffer<ffi::F32> x, ffi::AnyBuffer b, ffi::Buffer<ffi::PRED> mask,
                                 ffi::Buffer<ffi::F32> fill, ffi::ResultBuffer<ffi::F32> out, int64_t ldb,
                                 int64_t stride_b) {
  const auto dims = out->dimensions();
  const int64_t count = dims[0], rows = dims[1], width = dims[2], k = x.dimensions()[2];
  const bool *keep = mask.typed_data();
  const float *base = static_cast<const float *>(b.untyped_data());
  float partial[GROUP * kMaxWidth];
  for (int64_t p = 0; p < count; p++)
    for (int64_t r = 0; r < rows; r += GROUP) {
      const int64_t group = rows - r < GROUP ? rows - r : GROUP;
      const float *xp = x.typed_data() + p * rows * k + r * k;
      float *op = out->typed_data() + p * rows * width + r * width;
      int64_t start, stop = 0;
      bool first = true;  // the first run of rows kept written into out, each later one added to it
      while (next_run(keep, k, stop, &start, &stop)) {
        rows_case(xp + start, k, base + p * stride_b + start * ldb, ldb, first ? op : partial, width, stop - start,
                  group, width / LANES, r == 0);
        if (!first)
          for (int64_t i = 0; i < group * width; i++) op[i] += partial[i];
        first = false;
      }
      if (first) std::memset(op, 0, sizeof(float) * group * width);
      const float value = fill.typed_data()[0];
      if (value != 0.0f)
        for (int64_t g = 0; g < group; g++) {
          float left = 0.0f;  // the sum of x's entries at the rows left out
          for (int64_t i = 0; i < k; i++)
            if (!keep[i]) left += xp[g * k + i];
          for (int64_t c = 0; c < width; c++) op[g * width + c] += value * left;
        }
    }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(tempo_stacked_few_rows, StackedFewRows,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::PRED>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("ldb")
                                  .Attr<int64_t>("stride_b"));

static ffi::Error StackedFewColumns(ffi::AnyBuffer a, ffi::Buffer<ffi::F32> b, ffi::Buffer<ffi::PRED> mask,
                                    ffi::Buffer<ffi::F32> fill, ffi::ResultBuffer<ffi::F32> out, int64_t lda,
                                    int64_t stride_a) {
  const auto dims = out->dimensions();
  const int64_t count = dims[0], rows = dims[1], cols = dims[2], k = b.dimensions()[1];
  const bool *keep = mask.typed_data();
  const float *base = static_cast<const float *>(a.untyped_data()), *bs = b.typed_data();
  float *o = out->typed_data();
  const float value = fill.typed_data()[0];
  std::vector<float> left(count * cols, 0.0f);  // a row left out: fill times the sum of each column of b[p]
  if (value != 0.0f) {
    for (int64_t p = 0; p < count; p++)
      for (int64_t i = 0; i < k; i++)
        for (int64_t c = 0; c < cols; c++) left[p * cols + c] += bs[(p * k + i) * cols + c];
    for (float &sum : left) sum *= value;
  }
  int64_t start, stop = 0;  // each run of rows left out, product by product: one run of memory each
  while (next_run(keep, rows, stop, &start, &stop, false))
    for (int64_t p = 0; p < count; p++) {
      float *run = o + (p * rows + start) * cols;
      if (value == 0.0f) {
        std::memset(run, 0, sizeof(float) * (stop - start) * cols);
        continue;
      }
      for (int64_t r = 0; r < stop - start; r++)
        for (int64_t c = 0; c < cols; c++) run[r * cols + c] = left[p * cols + c];
    }
  stop = 0;  // each run of rows kept: every product at once (few_columns: its columns in registers)
  while (next_run(keep, rows, stop, &start, &stop))
    few_columns(base + start * lda, lda, stride_a, bs, k * cols, o + start * cols, rows * cols, count, stop - start,
                k, cols);
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(tempo_stacked_few_columns, StackedFewColumns,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::PRED>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("lda")
                                  .Attr<int64_t>("stride_a"));

/* The first run of rows the mask keeps: [*start, *stop), an empty run where it keeps none. */
static void kept_run(const bool *mask, int64_t rows, int64_t *start, int64_t *stop) {
  *start = *stop = 0;
  next_run(mask, rows, 0, start, stop);
}

static ffi::Error AttendSteps(ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> scale, ffi::RemainingArgs parts,
                              ffi::ResultBuffer<ffi::F32> out, ffi::Span<const int64_t> strides) {
  const auto dims = q.dimensions();
  const int64_t count = static_cast<int64_t>(parts.size()) / 3;
  if (dims.size() != 4 || count < 1 || count > MAX_PARTS || static_cast<int64_t>(strides.size()) != 6 * count)
    return ffi::Error::InvalidArgument("tempo_attend_steps: queries of rank 4 and 1 to 4 parts expected");
  const int64_t batch = dims[0], heads = dims[1], groups = dims[2], depth = dims[3];
  const int64_t pair = groups * depth;
  std::vector<int64_t> layout = {reinterpret_cast<int64_t>(q.typed_data()), heads * pair, pair, depth,
                                 reinterpret_cast<int64_t>(out->typed_data()), heads * pair, pair, depth};
  int64_t width = 0;
  for (int64_t i = 0; i < count; i++) {
    auto keys = parts.get<ffi::AnyBuffer>(3 * i), values = parts.get<ffi::AnyBuffer>(3 * i + 1);
    auto mask = parts.get<ffi::Buffer<ffi::PRED>>(3 * i + 2);
    if (!keys.has_value() || !values.has_value() || !mask.has_value())
      return ffi::Error::InvalidArgument("tempo_attend_steps: each part's keys, values and mask expected");
    const int64_t *s = strides.begin() + 6 * i;
    int64_t start, stop;
    kept_run(mask->typed_data(), static_cast<int64_t>(mask->element_count()), &start, &stop);
    const float *k = static_cast<const float *>(keys->untyped_data()) + start * s[2];
    const float *v = static_cast<const float *>(values->untyped_data()) + start * s[5];
    layout.insert(layout.end(), {stop - start, 0, reinterpret_cast<int64_t>(k), s[0], s[1], s[2], 0,
                                 reinterpret_cast<int64_t>(v), s[3], s[4], s[5]});
    width += stop - start;
  }
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(groups * (width > 0 ? width : 1)));
  attend_steps(layout.data(), batch, heads, groups, depth, count, scale.typed_data()[0], scratch.data());
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(tempo_attend_steps, AttendSteps,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .RemainingArgs()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<ffi::Span<const int64_t>>("strides"));
