/* What the kernels written with GCC vector extensions share (numpy_attention.c, numpy_rows.c):
 * vectors of 16 floats, a lane-wise pick, and e^r by Cephes' polynomial after the range reduction. */
#ifndef TEMPO_VECTOR16_H
#define TEMPO_VECTOR16_H

#include <stdint.h>

typedef float f16v __attribute__((vector_size(64)));
typedef int32_t i16v __attribute__((vector_size(64)));
#define LANES 16

static inline f16v splat(float x) { return (f16v){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

/* Lane i: yes[i] where mask[i] is set (all ones), else no[i]. */
static inline f16v pick(i16v mask, f16v yes, f16v no) {
  return (f16v)((mask & (i16v)yes) | (~mask & (i16v)no));
}

/* x = k ln 2 + r, |r| <= ln 2 / 2 (k rounded to an integer, written to *k): e^r by Cephes'
 * polynomial (within 2 ulp). The caller puts 2^k back into the exponent bits. */
static inline f16v exp_of_remainder(f16v x, f16v *k) {
  *k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  /* 1.5 * 2^23: rounds to an integer */
  f16v r = x - *k * 0.693359375f;
  r = r + *k * 2.12194440e-4f;
  f16v p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

#endif
