/* What the quantised product kernels share (quantized_kernels.c, int8_input_kernels.c). */
#ifndef TEMPO_QUANTIZED_BLOCKS_H
#define TEMPO_QUANTIZED_BLOCKS_H

#include <stdint.h>
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))
#define AHEAD 8192  /* bytes: how far ahead of the row being read its successors are fetched */

/* The input rows that share one read of a matrix row: GROUP accumulators per scale, in registers
 * (a batch of 4 sequences decoding reads every weight once a step, not 4 times). */
#define GROUP 4

/* Ask for the cache lines AHEAD bytes past a row of `bytes` (the rows read next): the
 * hardware's own prefetching alone leaves the loads waiting on memory. */
INLINE void prefetch_ahead(const char *row, int64_t bytes) {
  for (int64_t at = 0; at < bytes; at += 64) _mm_prefetch(row + AHEAD + at, _MM_HINT_T0);
}

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

#endif
