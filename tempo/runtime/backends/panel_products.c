/* A few float32 rows times a matrix stored as column panels (decoding's weight products).
 *
 * The matrix (k, count * width) is held as `count` panels of `width` columns,
 * (count, k, width), one after the other (tempo/transforms/pack_weights.py). For
 * each panel p and input row r:
 *
 *     out[p, r, :] = sum_i x[r, i] * panels[p, i, :]
 *
 * summed in order of i with fused multiply-adds, 16 lanes at a time. The panels
 * are read once, front to back, each asking for the bytes AHEAD past it
 * (software prefetch: the hardware's own prefetching alone leaves the loads
 * waiting on memory, and OpenBLAS's matrix-vector products read these panels at
 * 0.75-0.85x the rate of a plain stream). Up to GROUP input rows share one read
 * of a panel row; more rows read the panel again from the cache. Built with the
 * machine's C compiler at first use (tempo/runtime/native.py); AVX-512 only.
 */
#include <stdint.h>
#include <immintrin.h>

#ifndef __AVX512F__
#error "the panel product kernel needs AVX-512 (AVX512F)"
#endif

#define INLINE static inline __attribute__((always_inline))
#define AHEAD 2048  /* bytes fetched ahead of the panel row being read (1-3 KB run at the same rate) */
#define GROUP 4     /* input rows multiplied with one read of a panel row */
#define LANES 16

/* `group` rows of x (k apart) against one panel of `vectors` * 16 columns: out's rows `width` apart. */
INLINE void panel_rows(const float *panel, const float *x, float *out, const int64_t k, const int64_t group,
                       const int64_t vectors, const int fetch) {
  __m512 acc[GROUP][4];
  for (int64_t g = 0; g < group; g++)
    for (int64_t v = 0; v < vectors; v++) acc[g][v] = _mm512_setzero_ps();
  const int64_t width = vectors * LANES;
  for (int64_t i = 0; i < k; i++) {
    const float *row = panel + i * width;
    if (fetch)
      for (int64_t at = 0; at < width * 4; at += 64) _mm_prefetch((const char *)row + AHEAD + at, _MM_HINT_T0);
    for (int64_t v = 0; v < vectors; v++) {
      const __m512 w = _mm512_loadu_ps(row + v * LANES);
      for (int64_t g = 0; g < group; g++) acc[g][v] = _mm512_fmadd_ps(_mm512_set1_ps(x[g * k + i]), w, acc[g][v]);
    }
  }
  for (int64_t g = 0; g < group; g++)
    for (int64_t v = 0; v < vectors; v++) _mm512_storeu_ps(out + g * width + v * LANES, acc[g][v]);
}

/* The group and panel sizes as constants, so that each case is its own unrolled loop. */
#define CASE(G, V) panel_rows(panel, x, out, k, G, V, fetch)
INLINE void dispatch(const float *panel, const float *x, float *out, int64_t k, int64_t group, int64_t vectors,
                     int fetch) {
  switch (vectors * 8 + group) {
    case 8 + 1: CASE(1, 1); break;   case 8 + 2: CASE(2, 1); break;
    case 8 + 3: CASE(3, 1); break;   case 8 + 4: CASE(4, 1); break;
    case 16 + 1: CASE(1, 2); break;  case 16 + 2: CASE(2, 2); break;
    case 16 + 3: CASE(3, 2); break;  case 16 + 4: CASE(4, 2); break;
    case 24 + 1: CASE(1, 3); break;  case 24 + 2: CASE(2, 3); break;
    case 24 + 3: CASE(3, 3); break;  case 24 + 4: CASE(4, 3); break;
    case 32 + 1: CASE(1, 4); break;  case 32 + 2: CASE(2, 4); break;
    case 32 + 3: CASE(3, 4); break;  case 32 + 4: CASE(4, 4); break;
  }
}

/* out (count, rows, width) = x (rows, k) times each panel of panels (count, k, width); width a
 * multiple of 16, at most 64. */
void panel_product(const float *panels, const float *x, float *out, int64_t count, int64_t k, int64_t rows,
                   int64_t width) {
  const int64_t vectors = width / LANES;
  for (int64_t p = 0; p < count; p++) {
    const float *panel = panels + p * k * width;
    for (int64_t r = 0; r < rows; r += GROUP) {
      const int64_t group = rows - r < GROUP ? rows - r : GROUP;
      dispatch(panel, x + r * k, out + (p * rows + r) * width, k, group, vectors, r == 0);
    }
  }
}
