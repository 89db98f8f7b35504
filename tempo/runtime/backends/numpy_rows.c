/* A row program: a chain of float32 elementwise steps and reductions over the last axis, run one
 * row at a time in one call.
 *
 * The chain's values are arrays of one shape (lead..., n) or (lead..., 1): the rows of the lead
 * axes, each of n floats (a "row" value) or of one float (a "scalar" value, such as an RMSNorm's
 * mean). For each of the rows, run() executes the program's instructions in order; each reads
 * one or two operands and writes one value:
 *
 *     unary     neg, exp, sqrt, sigmoid, relu
 *     binary    add, sub, mul, div, maximum, minimum, pow
 *     reduce    sum, mean, max over the row (a row value to a scalar one)
 *
 * An operand is a slot: an array the call is given (an input, or an output the caller allocated)
 * or a register, a row of n floats or one float in a scratch buffer that stays in the core's
 * cache. A scalar operand of a row instruction is broadcast along the row.
 *
 * The arrays are NumPy arrays, passed as one Python tuple: run() reads each one's type, data
 * pointer, shape, strides and dtype from the object itself, at the offsets layout() was told
 * (numpy_rows.py finds them once on probe arrays), so that the caller asks Python for no
 * address and ctypes converts one argument. An array must be a float32 ndarray whose shape
 * broadcasts to (lead..., n), its last axis n (floats one after the other) or 1, its rows anywhere
 * (a view's strides). run() returns nonzero, having written
 * nothing the caller keeps, where an array is not so (the caller then runs the steps with NumPy).
 *
 * exp is Cephes' polynomial (within 2 ulp of the exact value), sums run in another order than
 * NumPy's: the results equal NumPy's to float32 rounding, not bit for bit. Scalar values use the
 * C library's functions (NumPy's own for float32 pow).
 *
 * Written with GCC vector extensions (16 floats), like numpy_attention.c; built at first use by
 * tempo/runtime/native.py.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vector16.h"

#define MAX_ARRAYS 16
#define MAX_NDIM 8
#define INLINE static inline __attribute__((always_inline))  /* each op its own loop */

enum { NEG, EXP, SQRT, SIGMOID, RELU, ADD = 10, SUB, MUL, DIV, MAXIMUM, MINIMUM, POW, SUM = 20, MEAN, MAX };

/* The first m floats at p (m <= LANES); the others 0. */
static inline f16v load(const float *p, int64_t m) {
  f16v v = splat(0.0f);
  memcpy(&v, p, (size_t)m * sizeof(float));
  return v;
}
static inline void store(float *p, f16v v, int64_t m) { memcpy(p, &v, (size_t)m * sizeof(float)); }

/* e^x (vector16.h's polynomial), 2^k as two powers of two (each a normal float) so that results
 * down to the subnormals and up to overflow are right. */
static inline f16v exp16(f16v x) {
  const i16v nan = x != x;
  x = pick(x < splat(-104.0f), splat(-104.0f), x);
  x = pick(x > splat(89.0f), splat(89.0f), x);
  f16v k;
  const f16v p = exp_of_remainder(x, &k);
  const i16v whole = __builtin_convertvector(k, i16v), half = whole >> 1;
  const f16v low = (f16v)((half + 127) << 23), high = (f16v)((whole - half + 127) << 23);
  return pick(nan, x, p * low * high);
}

INLINE f16v unary(int64_t op, f16v x) {
  switch (op) {
    case NEG: return -x;
    case EXP: return exp16(x);
    case SQRT: {
      f16v r = x;
      for (int k = 0; k < LANES; k++) r[k] = sqrtf(x[k]);
      return r;
    }
    case SIGMOID: return 1.0f / (exp16(-x) + 1.0f);
    default: return pick(x > 0.0f, x, pick(x != x, x, splat(0.0f)));  /* RELU */
  }
}

INLINE f16v binary(int64_t op, f16v x, f16v y) {
  switch (op) {
    case ADD: return x + y;
    case SUB: return x - y;
    case MUL: return x * y;
    case DIV: return x / y;
    case MAXIMUM: return pick((x >= y) | (x != x), x, y);
    case MINIMUM: return pick((x <= y) | (x != x), x, y);
    default: {  /* POW */
      f16v r = x;
      for (int k = 0; k < LANES; k++) r[k] = powf(x[k], y[k]);
      return r;
    }
  }
}

static float unary1(int64_t op, float x) { return unary(op, splat(x))[0]; }
static float binary1(int64_t op, float x, float y) {
  if (op == POW) return powf(x, y);
  return binary(op, splat(x), splat(y))[0];
}

/* The larger of two floats, NaN where either is (as NumPy's maximum). */
static inline float larger(float a, float b) { return b > a || b != b ? b : a; }

/* The sum, mean or max of the n floats at x. */
static float reduce(int64_t op, const float *x, int64_t n) {
  f16v acc = splat(op == MAX ? -INFINITY : 0.0f);
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES) {
    const f16v v = load(x + j, LANES);
    acc = op == MAX ? pick((v > acc) | (v != v), v, acc) : acc + v;
  }
  float total = op == MAX ? -INFINITY : 0.0f;
  for (int k = 0; k < LANES; k++) total = op == MAX ? larger(total, acc[k]) : total + acc[k];
  for (; j < n; j++) total = op == MAX ? larger(total, x[j]) : total + x[j];
  return op == MEAN ? total / (float)n : total;
}

/* out = op(x, y) (y unused for a unary op) along a row of n floats, a scalar operand broadcast. */
INLINE void each(int64_t op, float *out, const float *x, int x_scalar, const float *y, int y_scalar, int64_t n) {
  const f16v xs = splat(*x), ys = op >= ADD ? splat(*y) : xs;
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES) {
    const f16v u = x_scalar ? xs : load(x + j, LANES);
    store(out + j, op >= ADD ? binary(op, u, y_scalar ? ys : load(y + j, LANES)) : unary(op, u), LANES);
  }
  if (j < n) {
    const f16v u = x_scalar ? xs : load(x + j, n - j);
    store(out + j, op >= ADD ? binary(op, u, y_scalar ? ys : load(y + j, n - j)) : unary(op, u), n - j);
  }
}

static void along_row(int64_t op, float *out, const float *x, int x_scalar, const float *y, int y_scalar, int64_t n) {
  switch (op) {
#define CASE(OP) case OP: each(OP, out, x, x_scalar, y, y_scalar, n); break;
    CASE(NEG) CASE(EXP) CASE(SQRT) CASE(SIGMOID) CASE(RELU)
    CASE(ADD) CASE(SUB) CASE(MUL) CASE(DIV) CASE(MAXIMUM) CASE(MINIMUM) CASE(POW)
#undef CASE
  }
}

/* Where CPython and NumPy keep an object's type and an array's fields (byte offsets), and the
 * objects run() takes: ndarray's type and the float32 dtype. */
static int64_t at_type, at_data, at_ndim, at_shape, at_strides, at_descr, at_items;
static const void *array_type, *float32_descr;

void layout(const int64_t *offsets, const void *type, const void *descr) {
  at_type = offsets[0], at_data = offsets[1], at_ndim = offsets[2];
  at_shape = offsets[3], at_strides = offsets[4], at_descr = offsets[5], at_items = offsets[6];
  array_type = type, float32_descr = descr;
}

#define FIELD(object, at, type) (*(type *)((const char *)(object) + (at)))

/* The array `object` as rows of (lead..., n) (`full`, `ndim` axes): its first float, the floats
 * between rows along each lead axis (0 along an axis it broadcasts) and whether it holds one float
 * a row. 0 where it cannot be. */
static int rows_of(const void *object, const int64_t *full, int64_t ndim, float **data, int64_t *steps,
                   int *scalar) {
  if (FIELD(object, at_type, const void *) != array_type || FIELD(object, at_descr, const void *) != float32_descr)
    return 0;
  const int64_t nd = FIELD(object, at_ndim, int32_t);
  const int64_t *shape = FIELD(object, at_shape, const int64_t *);
  const int64_t *strides = FIELD(object, at_strides, const int64_t *);
  if (nd > ndim) return 0;
  const int64_t n = full[ndim - 1], last = nd ? shape[nd - 1] : 1;
  if (last != n && last != 1) return 0;
  if (nd && last > 1 && strides[nd - 1] != 4) return 0;
  *scalar = last == 1 && n > 1;
  for (int64_t a = 0; a + 1 < ndim; a++) {
    const int64_t i = a - (ndim - nd), size = i >= 0 ? shape[i] : 1;
    if (size != full[a] && size != 1) return 0;
    if (size > 1 && strides[i] % 4) return 0;
    steps[a] = size > 1 ? strides[i] / 4 : 0;
  }
  *data = FIELD(object, at_data, float *);
  return 1;
}

static __thread float *scratch;
static __thread int64_t held;

/* Run the program (see numpy_rows.py, RowProgram, for its layout) over the arrays of the tuple
 * `arrays_of` (its inputs, then its outputs). Returns 0, or nonzero where an array does not fit
 * (having written only into its outputs). */
int run(const int64_t *program, const void *arrays_of) {
  const void *const *objects = (const void *const *)((const char *)arrays_of + at_items);
  if (FIELD(arrays_of, at_items - 8, int64_t) != program[0]) return 5;
  const int64_t arrays = program[0], row_regs = program[1], scalar_regs = program[2], count = program[3];
  const int64_t ndim = program[4], *full = program + 5, *code = program + 5 + ndim, n = full[ndim - 1];
  int64_t rows = 1;
  for (int64_t a = 0; a + 1 < ndim; a++) rows *= full[a];
  const int64_t width = (n + LANES - 1) / LANES * LANES, need = row_regs * width + scalar_regs;
  if (need > held) {
    free(scratch);
    scratch = malloc((size_t)need * sizeof(float));
    held = scratch ? need : 0;
    if (!scratch) return 2;
  }
  if (ndim > MAX_NDIM || arrays > MAX_ARRAYS || arrays + row_regs + scalar_regs > MAX_ARRAYS + 64) return 3;
  float *base[MAX_ARRAYS], *at[MAX_ARRAYS + 64];
  int64_t steps[MAX_ARRAYS][MAX_NDIM], index[MAX_NDIM] = {0};
  int scalar[MAX_ARRAYS + 64];
  for (int64_t k = 0; k < arrays; k++)
    if (!rows_of(objects[k], full, ndim, &base[k], steps[k], &scalar[k])) return 1;
  for (int64_t k = 0; k < row_regs; k++) at[arrays + k] = scratch + k * width, scalar[arrays + k] = 0;
  for (int64_t k = 0; k < scalar_regs; k++) {
    const int64_t slot = arrays + row_regs + k;
    at[slot] = scratch + row_regs * width + k, scalar[slot] = 1;
  }
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t k = 0; k < arrays; k++) {
      int64_t offset = 0;
      for (int64_t a = 0; a + 1 < ndim; a++) offset += index[a] * steps[k][a];
      at[k] = base[k] + offset;
    }
    for (int64_t a = ndim - 2; a >= 0 && ++index[a] == full[a]; a--) index[a] = 0;  /* the next row's */
    for (int64_t c = 0; c < count; c++) {
      const int64_t *ins = code + 4 * c, op = ins[0], d = ins[1], x = ins[2], y = ins[3];
      if (op >= SUM) {
        *at[d] = scalar[x] ? *at[x] : reduce(op, at[x], n);
      } else if (scalar[d]) {
        if (!scalar[x] || (op >= ADD && !scalar[y])) return 4;
        *at[d] = op >= ADD ? binary1(op, *at[x], *at[y]) : unary1(op, *at[x]);
      } else {
        along_row(op, at[d], at[x], scalar[x], at[y], op >= ADD && scalar[y], n);
      }
    }
  }
  return 0;
}
