/* Float32 products with a few rows on one side (decoding's weight and attention products).
 *
 * few_rows: `count` products out[p] = x[p] (rows, k) @ b[p] (k, width), a few
 * rows (up to 32) against a matrix of `width` columns (a multiple of 16, at
 * most 64) whose rows lie `ldb` floats apart: a weight matrix stored as
 * column panels (tempo/transforms/pack_weights.py: count panels, one x for all,
 * x_stride 0) or attention's values, one head a product. Each output is summed
 * in order of k with fused multiply-adds, 16 lanes at a time. b is read once,
 * front to back. On Intel's cores each row asks for the bytes AHEAD past it
 * (software prefetch: there the hardware's own prefetching alone leaves the
 * loads waiting on memory; OpenBLAS's matrix-vector products read these panels
 * at 0.85-0.9x the rate of a plain stream); on AMD's it does not: there the
 * hardware's prefetching alone reads them faster (an AMD EPYC, the 135M
 * model's 538 MB of panels: 4 input rows 28.4 GB/s against 25.1 with the
 * software prefetches, 1 row 28.4 against 27.3; benchmarks/skinny_products.py).
 * Up to GROUP input rows share one read of a row of b,
 * each vector of it loaded into a register once (left to itself the compiler
 * folds a load into every multiply-add, and for 4 rows the loads, not memory,
 * bound the product); more rows read it again from the cache.
 *
 * few_columns: `count` products out[p] = a[p] (rows, k) @ b[p] (k, cols), many
 * rows of a (keys, `lda` floats apart) against a few columns (queries, up to
 * 4): each row of a read once, asking for the rows AHEAD bytes past it, its dot
 * products with the columns in 16 lanes, their lanes added in one tree. Rows of
 * up to 64 floats (a head's keys) are multiplied product after product, the
 * columns held in registers; longer rows row after row, row r of every product
 * before row r + 1 of any.
 *
 * Built with the machine's C compiler at first use (tempo/runtime/native.py);
 * AVX-512 only.
 */
#include <stdint.h>
#include <immintrin.h>

#ifndef __AVX512F__
#error "the skinny product kernels need AVX-512 (AVX512F)"
#endif

#define INLINE static inline __attribute__((always_inline))
#define AHEAD 2048  /* bytes of b's rows fetched ahead of the one being read, for one input row (further
                       * ahead, a decoding step's other work runs slower: the lines come in too early) */
#define AHEAD_ROWS 8192  /* the same for several input rows (at 2 KB, 4 rows by 64-column panels read short of
                          * a plain stream's rate) */
#define GROUP 4     /* input rows multiplied with one read of a row of b */
#define LANES 16
#define MAX_K 1024  /* few_columns' k */
#define MAX_BT 16384  /* floats of few_columns' columns held transposed on the stack (MAX_K x 4 at least) */

/* `group` rows of x (ldx apart) against b (k rows, ldb apart, `vectors` * 16 columns); out's rows ldo apart. */
INLINE void rows_by_matrix(const float *x, int64_t ldx, const float *b, int64_t ldb, float *out, int64_t ldo,
                           const int64_t k, const int64_t group, const int64_t vectors, const int fetch) {
  __m512 acc[GROUP][4];
  for (int64_t g = 0; g < group; g++)
    for (int64_t v = 0; v < vectors; v++) acc[g][v] = _mm512_setzero_ps();
  const int64_t width = vectors * LANES, ahead = (group > 1 ? AHEAD_ROWS : AHEAD) / (width * 4) * ldb;
  for (int64_t i = 0; i < k; i++) {
    const float *row = b + i * ldb;
    if (fetch)
      for (int64_t at = 0; at < width; at += LANES) _mm_prefetch((const char *)(row + ahead + at), _MM_HINT_T0);
    for (int64_t v = 0; v < vectors; v++) {
      __m512 w = _mm512_loadu_ps(row + v * LANES);
      if (group > 1) __asm__("" : "+v"(w));  /* one load of the row's vector into a register for every input row */
      for (int64_t g = 0; g < group; g++) acc[g][v] = _mm512_fmadd_ps(_mm512_set1_ps(x[g * ldx + i]), w, acc[g][v]);
    }
  }
  for (int64_t g = 0; g < group; g++)
    for (int64_t v = 0; v < vectors; v++) _mm512_storeu_ps(out + g * ldo + v * LANES, acc[g][v]);
}

/* The group and width as constants, so that each case is its own unrolled loop. */
#define ROWS(G, V) rows_by_matrix(x, ldx, b, ldb, out, ldo, k, G, V, fetch)
INLINE void rows_case(const float *x, int64_t ldx, const float *b, int64_t ldb, float *out, int64_t ldo, int64_t k,
                      int64_t group, int64_t vectors, int fetch) {
  switch (vectors * 8 + group) {
    case 8 + 1: ROWS(1, 1); break;   case 8 + 2: ROWS(2, 1); break;
    case 8 + 3: ROWS(3, 1); break;   case 8 + 4: ROWS(4, 1); break;
    case 16 + 1: ROWS(1, 2); break;  case 16 + 2: ROWS(2, 2); break;
    case 16 + 3: ROWS(3, 2); break;  case 16 + 4: ROWS(4, 2); break;
    case 24 + 1: ROWS(1, 3); break;  case 24 + 2: ROWS(2, 3); break;
    case 24 + 3: ROWS(3, 3); break;  case 24 + 4: ROWS(4, 3); break;
    case 32 + 1: ROWS(1, 4); break;  case 32 + 2: ROWS(2, 4); break;
    case 32 + 3: ROWS(3, 4); break;  case 32 + 4: ROWS(4, 4); break;
  }
}

/* Whether few_rows asks for b's rows ahead in software: not on AMD's cores (see the top). */
static int prefetching_rows(void) {
  static int answer = -1;
  if (answer < 0) answer = !__builtin_cpu_is("amd");
  return answer;
}

/* out[p] (rows, width; row i at ldo * i, p-th at p * stride_out) = x[p] (rows, k; row i at ldx * i, p-th at
 * p * stride_x) @ b[p] (k, width; row i at ldb * i, p-th at p * stride_b). */
void few_rows(const float *x, int64_t ldx, int64_t stride_x, const float *b, int64_t ldb, int64_t stride_b,
              float *out, int64_t ldo, int64_t stride_out, int64_t count, int64_t rows, int64_t k, int64_t width) {
  const int64_t vectors = width / LANES;
  const int fetch = prefetching_rows();
  for (int64_t p = 0; p < count; p++)
    for (int64_t r = 0; r < rows; r += GROUP) {
      const int64_t group = rows - r < GROUP ? rows - r : GROUP;
      rows_case(x + p * stride_x + r * ldx, ldx, b + p * stride_b, ldb, out + p * stride_out + r * ldo, ldo, k,
                group, vectors, fetch && r == 0);
    }
}

/* The lanes of a 512-bit vector added down to four (lane i of the result: lanes i, i + 4, ... of v). */
INLINE __m128 quarter_sum(__m512 v) {
  const __m256 half = _mm256_add_ps(_mm512_castps512_ps256(v),
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
}

/* Row r of a (k a multiple of 16) against `cols` columns held as rows bt[c] (k floats): out[c]. The
 * four sums of lanes are added across in one tree (horizontal adds), not one reduction a column. */
INLINE void row_by_columns(const float *row, const float *bt, float *out, const int64_t k, const int64_t cols,
                           const int64_t ahead) {
  for (int64_t at = 0; at < k; at += LANES) _mm_prefetch((const char *)(row + ahead + at), _MM_HINT_T0);
  __m512 acc[4];
  for (int64_t c = 0; c < 4; c++) acc[c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += LANES) {
    const __m512 w = _mm512_loadu_ps(row + i);
    for (int64_t c = 0; c < cols; c++) acc[c] = _mm512_fmadd_ps(w, _mm512_loadu_ps(bt + c * k + i), acc[c]);
  }
  float sums[4];
  _mm_storeu_ps(sums, _mm_hadd_ps(_mm_hadd_ps(quarter_sum(acc[0]), quarter_sum(acc[1])),
                                  _mm_hadd_ps(quarter_sum(acc[2]), quarter_sum(acc[3]))));
  for (int64_t c = 0; c < cols; c++) out[c] = sums[c];
}

/* Rows of the `count` products, row after row and within a row product after product:
 * where the products' rows interleave (attention's keys, one row a position holding every head),
 * memory is read front to back, once. */
INLINE void rows_by_columns(const float *a, int64_t lda, int64_t stride_a, const float *bt, float *out,
                            int64_t stride_out, int64_t count, int64_t rows, int64_t k, const int64_t cols) {
  const int64_t ahead = (AHEAD / (k * 4) + 1) * lda;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t p = 0; p < count; p++)
      row_by_columns(a + p * stride_a + r * lda, bt + p * cols * k, out + p * stride_out + r * cols, k, cols, ahead);
}

/* One product's rows (`vectors` * 16 = k floats each) against its columns held in registers: a row's
 * only loads are its own (with the columns loaded from memory at every row, the loads, not the
 * multiply-adds or the bytes, bound the product: 2x slower at 64 floats a row). */
INLINE void rows_by_held_columns(const float *a, int64_t lda, const float *bt, float *out, int64_t rows,
                                 const int64_t vectors, const int64_t cols, const int64_t ahead) {
  __m512 q[4][4];
  for (int64_t c = 0; c < cols; c++)
    for (int64_t v = 0; v < vectors; v++) q[c][v] = _mm512_loadu_ps(bt + (c * vectors + v) * LANES);
  for (int64_t r = 0; r < rows; r++) {
    const float *row = a + r * lda;
    for (int64_t v = 0; v < vectors; v++) _mm_prefetch((const char *)(row + ahead + v * LANES), _MM_HINT_T0);
    __m512 acc[4];
    for (int64_t c = 0; c < 4; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t v = 0; v < vectors; v++) {
      const __m512 w = _mm512_loadu_ps(row + v * LANES);
      for (int64_t c = 0; c < cols; c++) acc[c] = _mm512_fmadd_ps(w, q[c][v], acc[c]);
    }
    float sums[4];
    _mm_storeu_ps(sums, _mm_hadd_ps(_mm_hadd_ps(quarter_sum(acc[0]), quarter_sum(acc[1])),
                                    _mm_hadd_ps(quarter_sum(acc[2]), quarter_sum(acc[3]))));
    for (int64_t c = 0; c < cols; c++) out[r * cols + c] = sums[c];
  }
}

/* The products one after the other, each with its columns in registers (k of 16 to 64 floats). */
#define HELD(V, C) rows_by_held_columns(a + p * stride_a, lda, bt + p * cols * k, out + p * stride_out, rows, V, C, \
                                        ahead)
INLINE void products_by_held_columns(const float *a, int64_t lda, int64_t stride_a, const float *bt, float *out,
                                     int64_t stride_out, int64_t count, int64_t rows, int64_t k, int64_t cols) {
  const int64_t ahead = (AHEAD / (k * 4) + 1) * lda;
  for (int64_t p = 0; p < count; p++)
    switch (k / LANES * 8 + cols) {
      case 8 + 1: HELD(1, 1); break;   case 8 + 2: HELD(1, 2); break;
      case 8 + 3: HELD(1, 3); break;   case 8 + 4: HELD(1, 4); break;
      case 16 + 1: HELD(2, 1); break;  case 16 + 2: HELD(2, 2); break;
      case 16 + 3: HELD(2, 3); break;  case 16 + 4: HELD(2, 4); break;
      case 24 + 1: HELD(3, 1); break;  case 24 + 2: HELD(3, 2); break;
      case 24 + 3: HELD(3, 3); break;  case 24 + 4: HELD(3, 4); break;
      case 32 + 1: HELD(4, 1); break;  case 32 + 2: HELD(4, 2); break;
      case 32 + 3: HELD(4, 3); break;  case 32 + 4: HELD(4, 4); break;
    }
}

/* out[p] (rows, cols), C-ordered, p-th at p * stride_out, = a[p] (rows, k; row r at lda * r, p-th at
 * p * stride_a) @ b[p] (k, cols) C-ordered, p-th at p * stride_b; k a multiple of 16, at most MAX_K;
 * cols at most 4. The columns of as many products as MAX_BT floats hold are transposed at a time. */
void few_columns(const float *a, int64_t lda, int64_t stride_a, const float *b, int64_t stride_b, float *out,
                 int64_t stride_out, int64_t count, int64_t rows, int64_t k, int64_t cols) {
  float bt[MAX_BT];
  const int64_t chunk = MAX_BT / (cols * k);
  for (int64_t first = 0; first < count; first += chunk) {
    const int64_t some = count - first < chunk ? count - first : chunk;
    for (int64_t p = 0; p < some; p++) {
      const float *bp = b + (first + p) * stride_b;
      for (int64_t c = 0; c < cols; c++)
        for (int64_t i = 0; i < k; i++) bt[(p * cols + c) * k + i] = bp[i * cols + c];
    }
    const float *ap = a + first * stride_a;
    float *op = out + first * stride_out;
    if (k <= 4 * LANES) {
      products_by_held_columns(ap, lda, stride_a, bt, op, stride_out, some, rows, k, cols);
      continue;
    }
    switch (cols) {
      case 1: rows_by_columns(ap, lda, stride_a, bt, op, stride_out, some, rows, k, 1); break;
      case 2: rows_by_columns(ap, lda, stride_a, bt, op, stride_out, some, rows, k, 2); break;
      case 3: rows_by_columns(ap, lda, stride_a, bt, op, stride_out, some, rows, k, 3); break;
      case 4: rows_by_columns(ap, lda, stride_a, bt, op, stride_out, some, rows, k, 4); break;
    }
  }
}
