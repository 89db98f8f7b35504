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
 * prefetch); each widening serves up to GROUP input rows (a batch of 4
 * sequences decoding widens every weight once a step, not 4 times). Built with the machine's C compiler at first use
 * (tempo/llm/native.py); AVX-512 only.
 */
#include <stdint.h>
#include <stdlib.h>
#include <immintrin.h>

#include "quantized_blocks.h"

#ifndef __AVX512F__
#error "the quantised product kernels need AVX-512 (AVX512F)"
#endif

static inline __m512 widen_int8(const int8_t *q) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
}

/* int8 blocks of `block` weights (a multiple of 16), one scale each: Q8_0 (32), Q6_K (16, q - 32).
 * One matrix row against `group` input rows (x: the first of them, `width` apart); y[g * rows]. */
INLINE void int8_row(const int8_t *qr, const float *sr, const float *x, float *y, int64_t rows,
                     int64_t blocks, const int64_t block, const int64_t group) {
  const int64_t width = blocks * block;
  __m512 acc[GROUP], dot[GROUP];
  for (int64_t g = 0; g < group; g++) acc[g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; b++) {
    for (int64_t g = 0; g < group; g++) dot[g] = _mm512_setzero_ps();
    for (int64_t j = 0; j < block; j += 16) {
      const __m512 w = widen_int8(qr + b * block + j);
      for (int64_t g = 0; g < group; g++)
        dot[g] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + g * width + b * block + j), dot[g]);
    }
    const __m512 d = _mm512_set1_ps(sr[b]);
    for (int64_t g = 0; g < group; g++) acc[g] = _mm512_fmadd_ps(d, dot[g], acc[g]);
  }
  for (int64_t g = 0; g < group; g++) y[g * rows] = _mm512_reduce_add_ps(acc[g]);
}

/* Every row r of the matrix is read once (its successors prefetched) for all `inputs` rows of x,
 * GROUP at a time. */
INLINE void int8_body(const int8_t *q, const float *scale, const float *x, float *y,
                      int64_t rows, int64_t blocks, const int64_t block, int64_t inputs) {
  const int64_t width = blocks * block;
  for (int64_t r = 0; r < rows; r++) {
    const int8_t *qr = q + r * width;
    prefetch_ahead((const char *)qr, width);
    for (int64_t m = 0; m < inputs; m += GROUP) {
      const float *xm = x + m * width;
      float *ym = y + m * rows + r;
      switch (inputs - m) {
        case 1: int8_row(qr, scale + r * blocks, xm, ym, rows, blocks, block, 1); break;
        case 2: int8_row(qr, scale + r * blocks, xm, ym, rows, blocks, block, 2); break;
        case 3: int8_row(qr, scale + r * blocks, xm, ym, rows, blocks, block, 3); break;
        default: int8_row(qr, scale + r * blocks, xm, ym, rows, blocks, block, GROUP);
      }
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
 * Q4_1) or 2, one per half (Q4_K's). `offset` NULL: -8 * scale (Q4_0). One matrix row against
 * `group` input rows (x: the first, `width` apart; sums: their units' sums, `units` apart). */
INLINE void nibble_row(const uint8_t *qr, const float *sr, const float *or, const float *x, const float *sums,
                       float *y, int64_t rows, int64_t blocks, const int64_t block, const int64_t halves,
                       const int64_t group) {
  const int64_t half = block / 2, width = blocks * block, units = blocks * halves;
  const __m512 values = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 acc[GROUP], first[GROUP], second[GROUP];
  for (int64_t g = 0; g < group; g++) acc[g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; b++) {
    const uint8_t *qb = qr + b * half;
    for (int64_t g = 0; g < group; g++) first[g] = second[g] = _mm512_setzero_ps();
    for (int64_t j = 0; j < half; j += 16) {
      const __m512i w = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qb + j)));
      const __m512 low = _mm512_permutexvar_ps(w, values);        /* a lane's low 4 bits pick its value */
      const __m512 high = _mm512_permutexvar_ps(_mm512_srli_epi32(w, 4), values);
      for (int64_t g = 0; g < group; g++) {
        const float *xb = x + g * width + b * block;
        first[g] = _mm512_fmadd_ps(low, _mm512_loadu_ps(xb + j), first[g]);
        if (halves == 1) first[g] = _mm512_fmadd_ps(high, _mm512_loadu_ps(xb + half + j), first[g]);
        else second[g] = _mm512_fmadd_ps(high, _mm512_loadu_ps(xb + half + j), second[g]);
      }
    }
    const int64_t at = b * halves;
    for (int64_t g = 0; g < group; g++) {
      if (halves == 1) {
        acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(sr[at]), first[g], acc[g]);
      } else {
        acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(sr[at]), first[g], acc[g]);
        acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(sr[at + 1]), second[g], acc[g]);
      }
    }
  }
  for (int64_t g = 0; g < group; g++)
    y[g * rows] = _mm512_reduce_add_ps(acc[g]) + shift_of(or, sr, sums + g * units, units);
}

INLINE void nibble_body(const uint8_t *q, const float *scale, const float *offset, const float *x, float *y,
                        int64_t rows, int64_t blocks, const int64_t block, const int64_t halves, int64_t inputs) {
  const int64_t half = block / 2, units = blocks * halves, unit = block / halves;  /* a unit: one scale's weights */
  const int64_t width = blocks * block;
  float *sums = malloc(sizeof(float) * inputs * units);          /* each unit's sum of x */
  if (!sums) return;
  for (int64_t i = 0; i < inputs * units; i++) {
    const float *xu = x + i * unit;
    float s = 0;
    for (int64_t j = 0; j < unit; j++) s += xu[j];
    sums[i] = s;
  }
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t *qr = q + r * blocks * half;
    const float *sr = scale + r * units, *or = offset ? offset + r * units : NULL;
    prefetch_ahead((const char *)qr, blocks * half);
    for (int64_t m = 0; m < inputs; m += GROUP) {
      const float *xm = x + m * width, *sm = sums + m * units;
      float *ym = y + m * rows + r;
      switch (inputs - m) {
        case 1: nibble_row(qr, sr, or, xm, sm, ym, rows, blocks, block, halves, 1); break;
        case 2: nibble_row(qr, sr, or, xm, sm, ym, rows, blocks, block, halves, 2); break;
        case 3: nibble_row(qr, sr, or, xm, sm, ym, rows, blocks, block, halves, 3); break;
        default: nibble_row(qr, sr, or, xm, sm, ym, rows, blocks, block, halves, GROUP);
      }
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
