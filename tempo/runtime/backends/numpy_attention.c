/* Attention's softmax over rows of scores, in place, in two passes over each row.
 *
 * Row m of `s` (rows x width, row after row) holds the scores of one query
 * against `width` keys, of which it sees those in [lo[m], hi[m]). For each row:
 *
 *     x[j] = scale * s[j]                      (the keys it sees)
 *     s[j] = exp(x[j] - max_j x[j])            (the keys it sees; 0 for the others)
 *     sums[m] = sum_j s[j]
 *
 * the weights left unnormalised (the caller divides the product by the sums).
 * The first pass finds the largest score, the second writes the exponentials
 * and sums them; a row of a few thousand floats stays in the core's cache
 * between the two. Written with GCC vector extensions (16 floats), so any GCC
 * or Clang builds it for the machine's vector width; built at first use by
 * tempo/runtime/native.py.
 */
#include <stdint.h>
#include <string.h>

typedef float f16v __attribute__((vector_size(64)));
typedef int32_t i16v __attribute__((vector_size(64)));
#define LANES 16

static inline f16v load(const float *p) { f16v v; memcpy(&v, p, sizeof v); return v; }
static inline void store(float *p, f16v v) { memcpy(p, &v, sizeof v); }
static inline f16v splat(float x) { return (f16v){0} + x; }
static inline f16v select(i16v mask, f16v yes, f16v no) {
  return (f16v)((mask & (i16v)yes) | (~mask & (i16v)no));
}
static inline f16v vmax(f16v a, f16v b) { return select(a > b, a, b); }

#define LOWEST -87.33654f        /* below it e^x is under the smallest normal float: 0 */
#define ROUNDER 12582912.0f      /* 1.5 * 2^23: x + ROUNDER - ROUNDER rounds x to an integer */

/* e^x for x <= 0: x = n ln 2 + r, |r| <= ln 2 / 2, e^r by Cephes' polynomial (within 2 ulp),
 * 2^n written into the exponent bits. */
static inline f16v exp16(f16v x) {
  const i16v under = x < splat(LOWEST);
  x = select(under, splat(LOWEST), x);
  const f16v n = (x * 1.44269504088896341f + ROUNDER) - ROUNDER;
  f16v r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  f16v p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const i16v bits = (__builtin_convertvector(n, i16v) + 127) << 23;
  return select(under, splat(0.0f), p * (f16v)bits);
}

static inline float exp1(float x) {
  f16v v = splat(x);
  return exp16(v)[0];
}

static inline float hmax(f16v v) {
  float m = v[0];
  for (int k = 1; k < LANES; k++) m = v[k] > m ? v[k] : m;
  return m;
}

static inline float hsum(f16v v) {
  float s = 0.0f;
  for (int k = 0; k < LANES; k++) s += v[k];
  return s;
}

static void softmax_row(float *row, int64_t width, int64_t lo, int64_t hi, float scale, float *sum) {
  memset(row, 0, (size_t)lo * sizeof(float));
  memset(row + hi, 0, (size_t)(width - hi) * sizeof(float));
  float *x = row + lo;
  const int64_t n = hi - lo, whole = n - n % LANES;
  f16v top16 = splat(-__builtin_inff());
  for (int64_t j = 0; j < whole; j += LANES) top16 = vmax(top16, load(x + j) * scale);
  float top = hmax(top16);
  for (int64_t j = whole; j < n; j++) top = x[j] * scale > top ? x[j] * scale : top;
  f16v total16 = splat(0.0f);
  for (int64_t j = 0; j < whole; j += LANES) {
    const f16v e = exp16(load(x + j) * scale - top);
    store(x + j, e);
    total16 += e;
  }
  float total = hsum(total16);
  for (int64_t j = whole; j < n; j++) {
    x[j] = exp1(x[j] * scale - top);
    total += x[j];
  }
  *sum = total;
}

/* Every row of s: see the comment at the top. */
void softmax_rows(float *s, int64_t rows, int64_t width, const int64_t *lo, const int64_t *hi, float scale,
                  float *sums) {
  for (int64_t m = 0; m < rows; m++) softmax_row(s + m * width, width, lo[m], hi[m], scale, sums + m);
}
