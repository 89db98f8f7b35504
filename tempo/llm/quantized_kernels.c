/* Weight products computed from quantised blocks, for a few input rows (decoding).
 *
 * A matrix (rows, blocks * block) is stored by rows: row r's blocks one after
 * the other, each block's integers as the GGUF file holds them, and a float32
 * scale (and offset) per block. For each input row m:
 *
 *     y[m, r] = sum_b scale[r, b] * (q[r, b, :] . x[m, b, :]) + offset[r, b] * sum(x[m, b, :])
 *
 * Each block's integers are widened to float32 in registers, 16 at a time,
 * multiplied with the input and summed in float32 (16 lanes, fused
 * multiply-adds); the block's scale multiplies that sum. Only the quantised
 * bytes and the scales stream from memory. One row's weights are read once
 * for every input row, and each row asks for the bytes AHEAD past it (software
 * prefetch). Built with the machine's C compiler at first use
 * (tempo/llm/native.py); AVX-512 only.
 */
#include <stdint.h>
#include <stdlib.h>
#include <immintrin.h>

#ifndef __AVX512F__
#error "the quantised product kernels need AVX-512 (AVX512F)"
#endif

static inline __m512 widen_int8(const int8_t *q) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
}

#define INLINE static inline __attribute__((always_inline))
#define AHEAD 8192  /* bytes: how far ahead of the row being read its successors are fetched */

/* Ask for the cache lines AHEAD bytes past a row of `bytes` (the rows read next): the
 * hardware's own prefetching alone leaves the loads waiting on memory. */
INLINE void prefetch_ahead(const char *row, int64_t bytes) {
  for (int64_t at = 0; at < bytes; at += 64) _mm_prefetch(row + AHEAD + at, _MM_HINT_T0);
}

/* int8 blocks of `block` weights (a multiple of 16), one scale each: Q8_0 (32), Q6_K (16, q - 32). */
INLINE void int8_body(const int8_t *q, const float *scale, const float *x, float *y,
                      int64_t rows, int64_t blocks, const int64_t block, int64_t inputs) {
  for (int64_t r = 0; r < rows; r++) {
    prefetch_ahead((const char *)(q + r * blocks * block), blocks * block);
    for (int64_t m = 0; m < inputs; m++) {
      const float *xm = x + m * blocks * block;
      __m512 acc = _mm512_setzero_ps();
      for (int64_t b = 0; b < blocks; b++) {
        const int8_t *qb = q + (r * blocks + b) * block;
        const float *xb = xm + b * block;
        __m512 dot = _mm512_mul_ps(widen_int8(qb), _mm512_loadu_ps(xb));
        for (int64_t j = 16; j < block; j += 16)
          dot = _mm512_fmadd_ps(widen_int8(qb + j), _mm512_loadu_ps(xb + j), dot);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(scale[r * blocks + b]), dot, acc);
      }
      y[m * rows + r] = _mm512_reduce_add_ps(acc);
    }
  }
}

/* The bodies are compiled once per block size the stored forms use, its loops unrolled:
 * 1.2-1.3x faster than one body with the size read at run time. */
void int8_blocks(const int8_t *q, const float *scale, const float *x, float *y,
                 int64_t rows, int64_t blocks, int64_t block, int64_t inputs) {
  if (block == 32) int8_body(q, scale, x, y, rows, blocks, 32, inputs);
  else if (block == 16) int8_body(q, scale, x, y, rows, blocks, 16, inputs);
  else int8_body(q, scale, x, y, rows, blocks, block, inputs);
}

/* 4-bit blocks of `block` weights (a multiple of 32) in block / 2 bytes: the low nibbles hold the
 * block's first half, the high ones its second. `halves` scales and offsets per block: 1 (Q4_0,
 * Q4_1) or 2, one per half (Q4_K's). `offset` NULL: -8 * scale (Q4_0). */
/* sum_u offset[u] * sums[u] over `units` floats, 16 at a time; offset NULL: -8 * scale[u] (Q4_0). */
INLINE float shift_of(const float *offset, const float *scale, const float *sums, int64_t units) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t u = 0; u < units; u += 16) {
    const __mmask16 k = units - u >= 16 ? 0xFFFF : (__mmask16)((1u << (units - u)) - 1);
    const __m512 o = offset ? _mm512_maskz_loadu_ps(k, offset + u)
                            : _mm512_mul_ps(_mm512_set1_ps(-8), _mm512_maskz_loadu_ps(k, scale + u));
    acc = _mm512_fmadd_ps(o, _mm512_maskz_loadu_ps(k, sums + u), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

INLINE void nibble_body(const uint8_t *q, const float *scale, const float *offset, const float *x, float *y,
                        int64_t rows, int64_t blocks, const int64_t block, const int64_t halves, int64_t inputs) {
  const int64_t half = block / 2, units = blocks * halves, unit = block / halves;  /* a unit: one scale's weights */
  const __m512i low_bits = _mm512_set1_epi32(15);
  float *sums = malloc(sizeof(float) * inputs * units);          /* each unit's sum of x */
  if (!sums) return;
  for (int64_t i = 0; i < inputs * units; i++) {
    const float *xu = x + i * unit;
    float s = 0;
    for (int64_t j = 0; j < unit; j++) s += xu[j];
    sums[i] = s;
  }
  for (int64_t r = 0; r < rows; r++) {
    prefetch_ahead((const char *)(q + r * blocks * half), blocks * half);
    for (int64_t m = 0; m < inputs; m++) {
      const float *xm = x + m * blocks * block;
      __m512 acc = _mm512_setzero_ps();
      for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *qb = q + (r * blocks + b) * half;
        const float *xb = xm + b * block;
        __m512 first = _mm512_setzero_ps(), second = _mm512_setzero_ps();
        for (int64_t j = 0; j < half; j += 16) {
          __m512i w = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qb + j)));
          first = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(w, low_bits)), _mm512_loadu_ps(xb + j), first);
          second = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(w, 4)), _mm512_loadu_ps(xb + half + j), second);
        }
        const int64_t at = (r * blocks + b) * halves;
        if (halves == 1) {
          acc = _mm512_fmadd_ps(_mm512_set1_ps(scale[at]), _mm512_add_ps(first, second), acc);
        } else {
          acc = _mm512_fmadd_ps(_mm512_set1_ps(scale[at]), first, acc);
          acc = _mm512_fmadd_ps(_mm512_set1_ps(scale[at + 1]), second, acc);
        }
      }
      y[m * rows + r] = _mm512_reduce_add_ps(acc)
                      + shift_of(offset ? offset + r * units : NULL, scale + r * units, sums + m * units, units);
    }
  }
  free(sums);
}

void nibble_blocks(const uint8_t *q, const float *scale, const float *offset, const float *x, float *y,
                   int64_t rows, int64_t blocks, int64_t block, int64_t halves, int64_t inputs) {
  if (block == 32 && halves == 1) nibble_body(q, scale, offset, x, y, rows, blocks, 32, 1, inputs);
  else if (block == 64 && halves == 2) nibble_body(q, scale, offset, x, y, rows, blocks, 64, 2, inputs);
  else nibble_body(q, scale, offset, x, y, rows, blocks, block, halves, inputs);
}
