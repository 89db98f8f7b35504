/* Attention's kernels: a softmax over rows of scores, and a decoding step's attention whole.
 *
 * softmax_rows: row m of `s` (rows x width, row after row) holds the scores of
 * one query against `width` keys, of which it sees those in [lo[m], hi[m]).
 * For each row, in place:
 *
 *     x[j] = scale * s[j]                      (the keys it sees)
 *     s[j] = exp(x[j] - max_j x[j])            (the keys it sees; 0 for the others)
 *     sums[m] = sum_j s[j]
 *
 * the weights left unnormalised (the caller divides the product by the sums).
 * The first pass finds the largest score, the second writes the exponentials
 * and sums them; a row of a few thousand floats stays in the core's cache
 * between the two.
 *
 * attend_steps: a decoding step's attention for every (sequence, head) pair in
 * one call: a few queries (a head's group) against keys and values in one or
 * more parts (the step's own and the prompt's), one softmax over all of them:
 *
 *     out[g] = sum_j exp(s[g][j] - max_j s[g][j]) v[j] / sum_j exp(s[g][j] - max_j s[g][j]),
 *     s[g][j] = scale * q[g] . k[j]
 *
 * A pair's scores (groups x keys) are written to `scratch` as each block of 16 keys is read, then turned
 * into exponentials in place, then each value row read, its vectors multiplied with every group's weight:
 * the keys and values are read once, front to back, and no score leaves the core's cache. Each key row's
 * and value row's vectors are loaded into registers once and used for every group (a multiply-add that
 * reads its vector from memory, as compilers write it, loads it once per group: at 512 bits a load a
 * cycle, the loads, not the arithmetic, set the pace), and the lanes of each group's products with 16 key
 * rows are added in a tree of shuffles as the rows come (two rows, four, eight, sixteen), so that few
 * vectors are held at once. A pair's keys and values are each one run of memory, which the hardware's
 * prefetching reads ahead of the loads better than software prefetches do (asked for 1-16 KB ahead, the
 * keys and values of a step were read 10-40% slower; the next run's first 4-16 KB asked for before it
 * gained nothing), and one run after the other: keys and values read together, a chunk of each at a time
 * (an online softmax over chunks of 128-512 rows), were read 5-30% slower.
 *
 * Written with GCC vector extensions (16 floats), so any GCC (12 or later) or
 * Clang builds it for the machine's vector width; built at first use by
 * tempo/runtime/native.py.
 */
#include <stdint.h>
#include <string.h>

#include "vector16.h"

static inline f16v load(const float *p) { f16v v; memcpy(&v, p, sizeof v); return v; }
static inline void store(float *p, f16v v) { memcpy(p, &v, sizeof v); }
static inline f16v vmax(f16v a, f16v b) { return pick(a > b, a, b); }

#define LOWEST -87.33654f        /* below it e^x is under the smallest normal float: 0 */

/* e^x for x <= 0 (vector16.h's polynomial), 2^n written into the exponent bits. */
static inline f16v exp16(f16v x) {
  const i16v under = x < splat(LOWEST);
  f16v n;
  const f16v p = exp_of_remainder(pick(under, splat(LOWEST), x), &n);
  const i16v bits = (__builtin_convertvector(n, i16v) + 127) << 23;
  return pick(under, splat(0.0f), p * (f16v)bits);
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

/* The lanes of 16 vectors a[0..15] added into one vector whose lane i is a[i]'s sum, in four levels, each
 * adding two vectors' partial sums into one: sum_halves(a[2i], a[2i+1]) holds 8 partial sums of each,
 * sum_quarters of two of those 4 of each of 4 vectors, sum_pairs of two of those 2 of each of 8, and
 * sum_lanes of the last two the 16 sums. */
static inline f16v sum_halves(f16v x, f16v y) {
  return __builtin_shufflevector(x, y, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
         __builtin_shufflevector(x, y, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
}
static inline f16v sum_quarters(f16v x, f16v y) {
  return __builtin_shufflevector(x, y, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
         __builtin_shufflevector(x, y, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
}
static inline f16v sum_pairs(f16v x, f16v y) {
  return __builtin_shufflevector(x, y, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
         __builtin_shufflevector(x, y, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
}
static inline f16v sum_lanes(f16v x, f16v y) {
  return __builtin_shufflevector(x, y, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
         __builtin_shufflevector(x, y, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

/* Keeps v in a register: the loops below load a row's vectors once and use them for every group, which
 * a compiler would otherwise fold into each multiply-add as a memory operand (a load per group). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define IN_REGISTER(v) __asm__("" : "+v"(v))
#else
#define IN_REGISTER(v) (void)0
#endif

#define INLINE static inline __attribute__((always_inline))  /* each case its own unrolled code */
#define MAX_GROUPS 4
#define MAX_VECTORS 4  /* 64 floats a head */

/* Each group's products with key row k (its vectors loaded once), to a[g]. */
INLINE void row_products(const f16v held[MAX_GROUPS][MAX_VECTORS], const float *k, f16v a[MAX_GROUPS],
                         const int64_t groups, const int64_t vectors) {
  f16v key[MAX_VECTORS];
  for (int64_t v = 0; v < vectors; v++) {
    key[v] = load(k + v * LANES);
    IN_REGISTER(key[v]);
  }
  for (int64_t g = 0; g < groups; g++) {
    a[g] = held[g][0] * key[0];
    for (int64_t v = 1; v < vectors; v++) a[g] += held[g][v] * key[v];
  }
}

/* The scores of 16 key rows (ld floats apart) against each group's query, to s[g * width + 0..16): row by
 * row, each row's products for every group, their lanes added as the rows come (two rows, four, eight,
 * sixteen), so that few vectors are held at once. */
INLINE void block_scores(const f16v held[MAX_GROUPS][MAX_VECTORS], const float *k, int64_t ld, float *s,
                         int64_t width, float scale, const int64_t groups, const int64_t vectors) {
  f16v eight[MAX_GROUPS][2];
  for (int64_t e = 0; e < 2; e++) {
    f16v four[MAX_GROUPS][2];
    for (int64_t f = 0; f < 2; f++) {
      f16v two[MAX_GROUPS][2];
      for (int64_t t = 0; t < 2; t++) {
        f16v a[MAX_GROUPS], b[MAX_GROUPS];
        const float *row = k + (8 * e + 4 * f + 2 * t) * ld;
        row_products(held, row, a, groups, vectors);
        row_products(held, row + ld, b, groups, vectors);
        for (int64_t g = 0; g < groups; g++) two[g][t] = sum_halves(a[g], b[g]);
      }
      for (int64_t g = 0; g < groups; g++) four[g][f] = sum_quarters(two[g][0], two[g][1]);
    }
    for (int64_t g = 0; g < groups; g++) eight[g][e] = sum_pairs(four[g][0], four[g][1]);
  }
  for (int64_t g = 0; g < groups; g++) store(s + g * width, sum_lanes(eight[g][0], eight[g][1]) * scale);
}

/* The same for the last `rows` (< 16) rows: row by row, its lanes added alone. */
INLINE void tail_scores(const float *q, int64_t ldq, const float *k, int64_t ld, int64_t rows, float *s,
                        int64_t width, float scale, const int64_t groups, const int64_t vectors) {
  for (int64_t g = 0; g < groups; g++)
    for (int64_t r = 0; r < rows; r++) {
      f16v acc = splat(0.0f);
      for (int64_t v = 0; v < vectors; v++) acc += load(q + g * ldq + v * LANES) * load(k + r * ld + v * LANES);
      s[g * width + r] = hsum(acc) * scale;
    }
}

/* The scores of `count` key rows (ld floats apart; `vectors` * 16 floats each) against each group's
 * query (ldq floats apart), scaled, to s[g * width + j]: 16 rows at a time, each row's vectors loaded
 * once for every group. */
INLINE void scores_of(const float *q, int64_t ldq, const float *k, int64_t ld, int64_t count, float *s,
                             int64_t width, float scale, const int64_t groups, const int64_t vectors) {
  f16v held[MAX_GROUPS][MAX_VECTORS];
  for (int64_t g = 0; g < groups; g++)
    for (int64_t v = 0; v < vectors; v++) held[g][v] = load(q + g * ldq + v * LANES);
  int64_t j = 0;
  for (; j + 16 <= count; j += 16) block_scores(held, k + j * ld, ld, s + j, width, scale, groups, vectors);
  tail_scores(q, ldq, k + j * ld, ld, count - j, s + j, width, scale, groups, vectors);
}

/* acc[g] += sum_j w[g][j] v[j] over `count` value rows (ld floats apart), w's groups `stride` floats apart. */
INLINE void values_of(const float *w, int64_t stride, const float *v, int64_t ld, int64_t count,
                             f16v acc[MAX_GROUPS][MAX_VECTORS], const int64_t groups, const int64_t vectors) {
  for (int64_t j = 0; j < count; j++) {
    const float *row = v + j * ld;
    f16v x[MAX_VECTORS];
    for (int64_t u = 0; u < vectors; u++) {
      x[u] = load(row + u * LANES);
      IN_REGISTER(x[u]);
    }
    for (int64_t g = 0; g < groups; g++) {
      const f16v weight = splat(w[g * stride + j]);
      for (int64_t u = 0; u < vectors; u++) acc[g][u] += weight * x[u];
    }
  }
}

/* A part of a pair's keys and values: `length` rows; its keys (`keys`, rows `ld` floats apart), or, for a
 * part whose scores are given (keys NULL), its scores (`scores`: group g's j-th at g * ld + j * step);
 * its values (rows `ldv` floats apart). */
typedef struct {
  int64_t length, ld, step, ldv;
  const float *keys, *scores, *values;
} Part;

/* One (sequence, head) pair: see the comment at the top. */
INLINE void attend_pair(const float *q, int64_t ldq, float *out, int64_t ldo, const int64_t count,
                               const Part *parts, float scale, float *scratch, const int64_t groups,
                               const int64_t vectors) {
  int64_t width = 0;
  for (int64_t i = 0; i < count; i++) width += parts[i].length;
  for (int64_t i = 0, at = 0; i < count; at += parts[i].length, i++) {
    const Part *p = parts + i;
    if (p->keys != NULL) {
      scores_of(q, ldq, p->keys, p->ld, p->length, scratch + at, width, scale, groups, vectors);
      continue;
    }
    for (int64_t g = 0; g < groups; g++)
      for (int64_t j = 0; j < p->length; j++) scratch[g * width + at + j] = p->scores[g * p->ld + j * p->step];
  }
  float totals[MAX_GROUPS];
  for (int64_t g = 0; g < groups; g++) {
    float *x = scratch + g * width;
    const int64_t whole = width - width % LANES;
    f16v top16 = splat(-__builtin_inff());
    for (int64_t j = 0; j < whole; j += LANES) top16 = vmax(top16, load(x + j));
    float top = hmax(top16);
    for (int64_t j = whole; j < width; j++) top = x[j] > top ? x[j] : top;
    f16v total16 = splat(0.0f);
    for (int64_t j = 0; j < whole; j += LANES) {
      const f16v e = exp16(load(x + j) - top);
      store(x + j, e);
      total16 += e;
    }
    float total = hsum(total16);
    for (int64_t j = whole; j < width; j++) {
      x[j] = exp1(x[j] - top);
      total += x[j];
    }
    totals[g] = total;
  }
  f16v acc[MAX_GROUPS][MAX_VECTORS];
  for (int64_t g = 0; g < groups; g++)
    for (int64_t u = 0; u < vectors; u++) acc[g][u] = splat(0.0f);
  for (int64_t i = 0, at = 0; i < count; at += parts[i].length, i++)
    values_of(scratch + at, width, parts[i].values, parts[i].ldv, parts[i].length, acc, groups, vectors);
  for (int64_t g = 0; g < groups; g++)
    for (int64_t u = 0; u < vectors; u++) store(out + g * ldo + u * LANES, acc[g][u] / totals[g]);
}

#define MAX_PARTS 4
#define PAIR(G, V) attend_pair(q, d[3], out, d[7], count, parts, scale, scratch, G, V)

/* Every (sequence b, head h) pair of a decoding step. `layout` holds, as int64: the queries' address and
 * strides (per sequence, per head, per group), the output's the same, then per part 11 numbers: its
 * length; 0 and its keys' address and strides (sequence, head, row, 0), or 1 and its scores' (sequence,
 * head, group, position); its values' address and strides (sequence, head, row). The queries (`groups`
 * rows of `depth` floats a pair, depth 16 to 64 a multiple of 16, groups at most 4) against every part
 * (at most 4); `scratch` holds groups x (the parts' lengths) floats. */
void attend_steps(const int64_t *layout, int64_t batch, int64_t heads, int64_t groups, int64_t depth,
                  int64_t count, float scale, float *scratch) {
  const int64_t *d = layout;
  const int64_t vectors = depth / LANES;
  Part parts[MAX_PARTS];
  for (int64_t b = 0; b < batch; b++)
    for (int64_t h = 0; h < heads; h++) {
      const float *q = (const float *)d[0] + b * d[1] + h * d[2];
      float *out = (float *)d[4] + b * d[5] + h * d[6];
      for (int64_t i = 0; i < count; i++) {
        const int64_t *p = d + 8 + 11 * i;
        const float *at = (const float *)p[2] + b * p[3] + h * p[4];
        parts[i] = (Part){.length = p[0], .ld = p[5], .step = p[6], .ldv = p[10], .keys = p[1] ? NULL : at,
                          .scores = p[1] ? at : NULL, .values = (const float *)p[7] + b * p[8] + h * p[9]};
      }
      switch (vectors * 8 + groups) {
        case 8 + 1: PAIR(1, 1); break;   case 8 + 2: PAIR(2, 1); break;
        case 8 + 3: PAIR(3, 1); break;   case 8 + 4: PAIR(4, 1); break;
        case 16 + 1: PAIR(1, 2); break;  case 16 + 2: PAIR(2, 2); break;
        case 16 + 3: PAIR(3, 2); break;  case 16 + 4: PAIR(4, 2); break;
        case 24 + 1: PAIR(1, 3); break;  case 24 + 2: PAIR(2, 3); break;
        case 24 + 3: PAIR(3, 3); break;  case 24 + 4: PAIR(4, 3); break;
        case 32 + 1: PAIR(1, 4); break;  case 32 + 2: PAIR(2, 4); break;
        case 32 + 3: PAIR(3, 4); break;  case 32 + 4: PAIR(4, 4); break;
      }
    }
}
