/* Weight products computed from quantised blocks with the input rows rounded to 8 bits (decoding).
 *
 * The input rows x are rounded per block of 32 to int8 values and a float32 scale (as llama.cpp
 * rounds its activations): xs = max|x_u| / 127, qx = rint(x / xs) (x times 1 / xs), so the product
 * is that of the rounded rows xh = xs * qx with the weights:
 *
 *     y[m, r] = sum_u s[r, u] * xs[m, u] * (q[r, u, :] . qx[m, u, :]) + o[r, u] * sum(xh[m, u, :])
 *
 * Each dot product of integers is exact (int32, AVX512-VNNI's vpdpbusd: 64 byte products in one
 * instruction, unsigned weights by signed inputs); int8 weights (Q8_0, Q6_K) are read as
 * w + 128 (their sign bit flipped) and 128 * sum(qx) comes off before the dot. A 64-byte chunk of
 * a row fills 16 lanes of 4 products; each lane belongs to one weight block and one input block,
 * whose scales multiply it in float32. Only the quantised bytes and the scales stream from memory,
 * for up to GROUP input rows at once. Built with the machine's C compiler at first use
 * (tempo/llm/native.py); AVX-512 with VNNI only.
 */
#include <stdint.h>
#include <stdlib.h>
#include <immintrin.h>

#include "quantized_blocks.h"

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VNNI__)
#error "the 8-bit input kernels need AVX-512 with VNNI (AVX512F, AVX512BW, AVX512VNNI)"
#endif

/* The input rows rounded: per row, `chunks` chunks of 64 int8 values (zeros past `width`), the
 * scale of each block of 32 spread over the 16 lanes of each chunk (`spread`), and either each
 * lane's 128 * sum of its 4 values, negated (`start`: signed weights), or each block's sum of the
 * rounded inputs (`sums`: 4-bit weights). */
typedef struct {
  int8_t *qx;
  float *spread, *sums;
  int32_t *start;
  int64_t chunks;
} Rounded;

INLINE int round_inputs(const float *x, int64_t inputs, int64_t width, int signed_weights, Rounded *out) {
  const int64_t chunks = (width + 63) / 64, units = chunks * 2;
  out->chunks = chunks;
  out->qx = calloc((size_t)(inputs * chunks * 64), 1);
  out->spread = malloc(sizeof(float) * inputs * chunks * 16);
  out->sums = calloc((size_t)(inputs * units), sizeof(float));
  out->start = malloc(sizeof(int32_t) * inputs * chunks * 16);
  if (!out->qx || !out->spread || !out->sums || !out->start) return 0;
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t m = 0; m < inputs; m++) {
    for (int64_t u = 0; u < width / 32; u++) {           /* width: a multiple of 32 */
      const float *xu = x + m * width + u * 32;
      const __m512 a = _mm512_loadu_ps(xu), b = _mm512_loadu_ps(xu + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
      const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(id)));  /* nearest, ties to even */
      const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, _mm512_set1_ps(id)));
      int8_t *qu = out->qx + m * chunks * 64 + u * 32;
      _mm_storeu_si128((__m128i *)qu, _mm512_cvtepi32_epi8(qa));
      _mm_storeu_si128((__m128i *)(qu + 16), _mm512_cvtepi32_epi8(qb));
      out->sums[m * units + u] = d * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
      float *spread = out->spread + m * chunks * 16 + (u / 2) * 16 + (u % 2) * 8;
      _mm256_storeu_ps(spread, _mm256_set1_ps(d));
    }
    if (width % 64) _mm256_storeu_ps(out->spread + m * chunks * 16 + (chunks - 1) * 16 + 8, _mm256_setzero_ps());
    for (int64_t c = 0; c < chunks; c++) {                 /* each lane's 4 values summed, times -128 */
      const __m512i four = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones,
                                               _mm512_loadu_si512(out->qx + m * chunks * 64 + c * 64));
      _mm512_storeu_si512(out->start + m * chunks * 16 + c * 16,
                          signed_weights ? _mm512_mullo_epi32(four, _mm512_set1_epi32(-128)) : _mm512_setzero_si512());
    }
  }
  return 1;
}

INLINE void release(Rounded *r) {
  free(r->qx);
  free(r->spread);
  free(r->sums);
  free(r->start);
}

/* Chunk c of a row of int8 weights, its sign bits flipped (w + 128 as unsigned bytes); `full`:
 * all 64 bytes lie in the row. */
INLINE __m512i int8_chunk(const int8_t *qr, int64_t c, int64_t width, const int full) {
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  if (full) return _mm512_xor_si512(_mm512_loadu_si512(qr + c * 64), flip);
  const __mmask64 k = ((__mmask64)1 << (width - c * 64)) - 1;
  return _mm512_xor_si512(_mm512_maskz_loadu_epi8(k, qr + c * 64), flip);
}

/* Chunk c (64 weights) of a row of 4-bit weights, as bytes 0-15 in the weights' order: blocks of
 * 32 (16 bytes each: the first half in the low nibbles) or of 64 (32 bytes: the first 32 in the
 * low nibbles). */
INLINE __m512i nibble_chunk(const uint8_t *qr, int64_t c, int64_t width, const int64_t block, const int full) {
  const __m256i bytes = full ? _mm256_loadu_si256((const __m256i *)(qr + c * 32))
                             : _mm256_maskz_loadu_epi8(((__mmask32)1 << ((width - c * 64) / 2)) - 1, qr + c * 32);
  const __m512i y = _mm512_castsi256_si512(bytes);
  __m512i z;
  __mmask32 high;
  if (block == 32) {                               /* 128-bit lanes: b0, b0, b1, b1 */
    z = _mm512_shuffle_i64x2(y, y, _MM_SHUFFLE(1, 1, 0, 0));
    high = 0xFF00FF00u;
  } else {                                         /* 256-bit halves: the block twice */
    z = _mm512_shuffle_i64x2(y, y, _MM_SHUFFLE(1, 0, 1, 0));
    high = 0xFFFF0000u;
  }
  z = _mm512_mask_srli_epi16(z, high, z, 4);
  return _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
}

/* The weights' scales of chunk c spread over its lanes: `unit` weights per scale (16 or 32);
 * `full`: the chunk's scales all lie in the row. */
INLINE __m512 weight_scales(const float *s, int64_t c, int64_t units, const int64_t unit, const int full) {
  const int64_t per = 64 / unit;
  const __m512i idx = unit == 16 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
                                 : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  __m512 v;
  if (full && unit == 32) v = _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(s + c * 2))));
  else if (full) v = _mm512_castps128_ps512(_mm_loadu_ps(s + c * 4));
  else v = _mm512_maskz_loadu_ps((__mmask16)((1u << (units - c * per)) - 1), s + c * per);
  return _mm512_permutexvar_ps(idx, v);
}

/* Chunk c of one matrix row against `group` rounded input rows (from input row m0), added to acc.
 * kind: 0 int8 weights, 1 4-bit blocks of 32, 2 4-bit blocks of 64 (Q4_K); unit: weights per scale. */
INLINE void chunk_by_inputs(const void *qr, const float *sr, const Rounded *x, int64_t m0, int64_t c,
                            int64_t width, const int kind, const int64_t unit, const int64_t group,
                            const int full, __m512 *acc) {
  const int64_t chunks = x->chunks, units = width / unit;
  const __m512i w = kind == 0 ? int8_chunk((const int8_t *)qr, c, width, full)
                              : nibble_chunk((const uint8_t *)qr, c, width, kind == 1 ? 32 : 64, full);
  const __m512 s = weight_scales(sr, c, units, unit, full);
  for (int64_t g = 0; g < group; g++) {
    const int64_t at = (m0 + g) * chunks + c;
    const __m512i begin = kind == 0 ? _mm512_loadu_si512(x->start + at * 16) : _mm512_setzero_si512();
    const __m512i dot = _mm512_dpbusd_epi32(begin, w, _mm512_loadu_si512(x->qx + at * 64));
    acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(s, _mm512_loadu_ps(x->spread + at * 16)), acc[g]);
  }
}

/* One matrix row against `group` rounded input rows (from input row m0): the chunks that lie in
 * the row whole, then the last, shorter one. */
INLINE void row_by_inputs(const void *qr, const float *sr, const float *or, const Rounded *x, int64_t m0,
                          float *y, int64_t rows, int64_t width, const int kind, const int64_t unit,
                          const int64_t group) {
  const int64_t whole = width / 64, units = width / unit;
  __m512 acc[GROUP];
  for (int64_t g = 0; g < group; g++) acc[g] = _mm512_setzero_ps();
  for (int64_t c = 0; c < whole; c++) chunk_by_inputs(qr, sr, x, m0, c, width, kind, unit, group, 1, acc);
  if (whole < x->chunks) chunk_by_inputs(qr, sr, x, m0, whole, width, kind, unit, group, 0, acc);
  for (int64_t g = 0; g < group; g++) {
    float total = _mm512_reduce_add_ps(acc[g]);
    if (kind != 0) total += shift_of(or, sr, x->sums + (m0 + g) * x->chunks * 2, units);
    y[g * rows] = total;
  }
}

INLINE void body(const void *q, const float *scale, const float *offset, const Rounded *x, float *y,
                 int64_t rows, int64_t width, const int kind, const int64_t unit, int64_t inputs) {
  const int64_t row_bytes = kind == 0 ? width : width / 2, units = width / unit;
  for (int64_t r = 0; r < rows; r++) {
    const char *qr = (const char *)q + r * row_bytes;
    const float *sr = scale + r * units, *or = offset ? offset + r * units : NULL;
    prefetch_ahead(qr, row_bytes);
    for (int64_t m = 0; m < inputs; m += GROUP) {
      float *ym = y + m * rows + r;
      switch (inputs - m) {
        case 1: row_by_inputs(qr, sr, or, x, m, ym, rows, width, kind, unit, 1); break;
        case 2: row_by_inputs(qr, sr, or, x, m, ym, rows, width, kind, unit, 2); break;
        case 3: row_by_inputs(qr, sr, or, x, m, ym, rows, width, kind, unit, 3); break;
        default: row_by_inputs(qr, sr, or, x, m, ym, rows, width, kind, unit, GROUP);
      }
    }
  }
}

/* The inputs rounded, then every row of the matrix by them (kind and unit: row_by_inputs'). */
INLINE void rounded_product(const void *q, const float *scale, const float *offset, const float *x, float *y,
                            int64_t rows, int64_t width, const int kind, const int64_t unit, int64_t inputs) {
  Rounded r;
  if (round_inputs(x, inputs, width, kind == 0, &r)) body(q, scale, offset, &r, y, rows, width, kind, unit, inputs);
  release(&r);
}

/* int8 blocks of `block` (32: Q8_0; 16: Q6_K) by `inputs` rows of x (rows, width = blocks * block). */
void int8_blocks_int8_inputs(const int8_t *q, const float *scale, const float *x, float *y,
                             int64_t rows, int64_t blocks, int64_t block, int64_t inputs) {
  if (block == 32) rounded_product(q, scale, NULL, x, y, rows, blocks * block, 0, 32, inputs);
  else rounded_product(q, scale, NULL, x, y, rows, blocks * block, 0, 16, inputs);
}

/* 4-bit blocks of `block` (32: Q4_0, Q4_1; 64 with a scale and offset per half: Q4_K); `offset`
 * NULL: -8 * scale (Q4_0). */
void nibble_blocks_int8_inputs(const uint8_t *q, const float *scale, const float *offset, const float *x,
                               float *y, int64_t rows, int64_t blocks, int64_t block, int64_t inputs) {
  if (block == 32) rounded_product(q, scale, offset, x, y, rows, blocks * block, 1, 32, inputs);
  else rounded_product(q, scale, offset, x, y, rows, blocks * block, 2, 32, inputs);
}
