/* Attention whose every output row depends only on its query and the keys it may see, in order.
 *
 * Each (row, query, query head) is computed from its own visible keys (additive mask above MASKED) in slot
 * order: each score is one multiply-add after another over the head dimension (run for 4 queries x 16 keys
 * at a time, from keys laid out head dimension first), probabilities come from one fixed exp, and the
 * softmax's normaliser and the weighted sum of values accumulate key after key. A masked key contributes
 * exactly nothing (its probability is 0), so a query gets the same arithmetic whether it is verified alone,
 * inside a tree of any shape (ancestors at other slots, siblings between them, a longer key range), or beside
 * other rows of a batch: a tree's logits are bit-identical to one-token steps. Work items are (row, KV head,
 * block of queries); a thread lays out a (row, KV head)'s keys once for its blocks. Inputs and output are fp32
 * or bf16 (dtype 0 / 1), the mask fp32 or bf16 (mask_bf16), each with a unit last stride, the head dimension
 * a multiple of 16; arithmetic is fp32.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MASKED -1e30f
#define BLOCK 4 /* queries per work item: 4 balances a tree of 8 over 2 threads (measured against 2 and 8) */

typedef struct {
    const void *q, *k, *v, *mask; void *out;
    const int64_t *qs, *ks, *vs, *ms, *os; /* strides: q [B,H,T,D], k/v [B,KVH,S,D], mask [B,T,S], out [B,T,H,D] */
    int64_t heads, kv_heads, queries, keys, dim; float scale; int bf16, mask_bf16;
    int64_t first, last; /* work items [first, last) of batch * kv_heads * ceil(queries / BLOCK) */
} Job;

/* Row `offset` of a tensor as fp32: in place for fp32, converted into `buffer` for bf16. */
static inline const float *row_at(float *buffer, const void *base, int64_t offset, int64_t n, int bf16) {
    if (!bf16) return (const float *)base + offset;
    const uint16_t *src = (const uint16_t *)base + offset;
    uint32_t *bits = (uint32_t *)buffer;
    for (int64_t i = 0; i < n; i++) bits[i] = (uint32_t)src[i] << 16;
    return buffer;
}

/* The mask's element `i` (bf16 widens exactly). */
static inline float mask_at(const Job *j, int64_t i) {
    if (!j->mask_bf16) return ((const float *)j->mask)[i];
    const uint32_t bits = (uint32_t)((const uint16_t *)j->mask)[i] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline void store(void *base, int64_t i, float f, int bf16) {
    if (!bf16) { ((float *)base)[i] = f; return; }
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) { ((uint16_t *)base)[i] = (uint16_t)((u >> 16) | 0x40); return; }
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even, as torch does */
    ((uint16_t *)base)[i] = (uint16_t)(u >> 16);
}

typedef float vec __attribute__((vector_size(8 * sizeof(float)))); /* AVX2's width, native everywhere */
typedef int32_t lanes __attribute__((vector_size(8 * sizeof(int32_t))));

/* Scores of 4 query rows against 16 keys, from keys laid out 8 at a time with the head dimension first
 * (kt[x * 8 + i] = key i's element x; the second 8 keys at kt + 8 * d): lane i of out[row][half] is
 * sum over x, in order, of q[row][x] * key[x], one multiply-add at a time. So each score is the same arithmetic
 * whatever rows and keys share its tile. */
static inline void scores_4x16(vec out[4][2], const float *const q[4], const float *kt, int64_t d) {
    vec a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0}, k0, k1;
    const float *q0 = q[0], *q1 = q[1], *q2 = q[2], *q3 = q[3], *kt1 = kt + 8 * d;
    for (int64_t x = 0; x < d; x++) {
        memcpy(&k0, kt + 8 * x, sizeof k0); memcpy(&k1, kt1 + 8 * x, sizeof k1);
        a00 += q0[x] * k0; a01 += q0[x] * k1;
        a10 += q1[x] * k0; a11 += q1[x] * k1;
        a20 += q2[x] * k0; a21 += q2[x] * k1;
        a30 += q3[x] * k0; a31 += q3[x] * k1;
    }
    out[0][0] = a00; out[0][1] = a01; out[1][0] = a10; out[1][1] = a11;
    out[2][0] = a20; out[2][1] = a21; out[3][0] = a30; out[3][1] = a31;
}

/* e^x for x <= 0 on 8 lanes (Cephes' expf polynomial, ~1 ulp; rounding by adding and taking away 1.5 * 2^23, which
 * is rintf's for these magnitudes); exactly 0 below -87 and for -inf. */
static inline vec exp_nonpositive(vec x) {
    const vec magic = (vec){0} + 12582912.0f;
    const vec n = (x * 1.44269504088896341f + magic) - magic;
    vec r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    vec p = (vec){0} + 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    const lanes under = x < -87.0f, e = (__builtin_convertvector(n, lanes) + 127) << 23;
    vec scale, y;
    memcpy(&scale, &e, sizeof scale);
    y = p * scale;
    lanes bits;
    memcpy(&bits, &y, sizeof bits);
    bits &= ~under;
    memcpy(&y, &bits, sizeof y);
    return y;
}

/* For 3 rows of probabilities p[0..2] (a row of zeros where there are fewer): acc[row][0 .. w) = the sum over the
 * keys s, in order, of p[row][s] * value(s)[x0 + ..], lane-wise, one multiply-add at a time; w is 32 (in registers,
 * the three rows sharing each value load) or 16. A key whose probability is 0 adds exactly 0, so the keys other rows
 * see change nothing. */
static inline void weighted_sums_3(float acc[3][32], const float *const p[3], const float *const *values, int64_t n,
                                   int64_t x0, int64_t w) {
    vec a00 = {0}, a01 = {0}, a02 = {0}, a03 = {0}, a10 = {0}, a11 = {0}, a12 = {0}, a13 = {0};
    vec a20 = {0}, a21 = {0}, a22 = {0}, a23 = {0}, v0;
    const float *p0 = p[0], *p1 = p[1], *p2 = p[2];
    for (int64_t s = 0; s < n; s++) {
        if (p0[s] == 0.0f && p1[s] == 0.0f && p2[s] == 0.0f) continue;
        const float *v = values[s] + x0; /* one value vector live at a time: 12 sums, 3 weights, 1 value */
        memcpy(&v0, v, sizeof v0);
        a00 += p0[s] * v0; a10 += p1[s] * v0; a20 += p2[s] * v0;
        memcpy(&v0, v + 8, sizeof v0);
        a01 += p0[s] * v0; a11 += p1[s] * v0; a21 += p2[s] * v0;
        if (w == 32) {
            memcpy(&v0, v + 16, sizeof v0);
            a02 += p0[s] * v0; a12 += p1[s] * v0; a22 += p2[s] * v0;
            memcpy(&v0, v + 24, sizeof v0);
            a03 += p0[s] * v0; a13 += p1[s] * v0; a23 += p2[s] * v0;
        }
    }
    const vec rows[3][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23}};
    for (int r = 0; r < 3; r++) memcpy(acc[r], rows[r], sizeof rows[r]);
}

/* Rows of V for one (row, KV head) as fp32 pointers: in place for fp32, converted into `buffer` for bf16. */
static void value_rows(const float **rows, float *buffer, const Job *j, int64_t b, int64_t kvh) {
    for (int64_t s = 0; s < j->keys; s++)
        rows[s] = row_at(buffer + s * j->dim, j->v, b * j->vs[0] + kvh * j->vs[1] + s * j->vs[2], j->dim, j->bf16);
}

/* The 8x8 block rows[i][0..8) transposed into out[x * 8 + i] (stride 8 between the outputs). */
static inline void transpose8(float *out, const float *const rows[8]) {
    vec r[8], t[8];
    for (int i = 0; i < 8; i++) memcpy(&r[i], rows[i], sizeof r[i]);
    for (int i = 0; i < 8; i += 2) { /* pairs of rows interleaved */
        t[i] = __builtin_shuffle(r[i], r[i + 1], (lanes){0, 8, 1, 9, 4, 12, 5, 13});
        t[i + 1] = __builtin_shuffle(r[i], r[i + 1], (lanes){2, 10, 3, 11, 6, 14, 7, 15});
    }
    for (int i = 0; i < 8; i += 4) { /* then pairs of pairs */
        r[i] = __builtin_shuffle(t[i], t[i + 2], (lanes){0, 1, 8, 9, 4, 5, 12, 13});
        r[i + 1] = __builtin_shuffle(t[i], t[i + 2], (lanes){2, 3, 10, 11, 6, 7, 14, 15});
        r[i + 2] = __builtin_shuffle(t[i + 1], t[i + 3], (lanes){0, 1, 8, 9, 4, 5, 12, 13});
        r[i + 3] = __builtin_shuffle(t[i + 1], t[i + 3], (lanes){2, 3, 10, 11, 6, 7, 14, 15});
    }
    for (int i = 0; i < 4; i++) { /* then the 128-bit halves */
        t[i] = __builtin_shuffle(r[i], r[i + 4], (lanes){0, 1, 2, 3, 8, 9, 10, 11});
        t[i + 4] = __builtin_shuffle(r[i], r[i + 4], (lanes){4, 5, 6, 7, 12, 13, 14, 15});
    }
    for (int i = 0; i < 8; i++) memcpy(out + 8 * i, &t[i], sizeof t[i]);
}

/* K for one (row, KV head), 8 keys at a time with the head dimension first (see scores_4x16), zeros past the last
 * key up to `padded`; `buffer` holds 8 rows converted from bf16. */
static void transposed_keys(float *kt, float *buffer, const float *zero, const Job *j, int64_t b, int64_t kvh,
                            int64_t padded) {
    const int64_t d = j->dim;
    for (int64_t s0 = 0; s0 < padded; s0 += 8) {
        const float *rows[8];
        for (int i = 0; i < 8; i++) {
            const int64_t at = b * j->ks[0] + kvh * j->ks[1] + (s0 + i) * j->ks[2];
            rows[i] = s0 + i < j->keys ? row_at(buffer + i * d, j->k, at, d, j->bf16) : zero;
        }
        for (int64_t x = 0; x < d; x += 8) {
            const float *block[8];
            for (int i = 0; i < 8; i++) block[i] = rows[i] + x;
            transpose8(kt + s0 * d + 8 * x, block);
        }
    }
}

static void run(const Job *j) {
    const int64_t group = j->heads / j->kv_heads, d = j->dim, n = j->keys, blocks = (j->queries + BLOCK - 1) / BLOCK;
    const int64_t rows = BLOCK * group, padded = (n + 15) / 16 * 16; /* keys padded to whole 4x16 tiles */
    const int64_t tiled = (rows + 3) / 4 * 4;                         /* query rows padded to whole tiles */
    /* malloc'd per call: a per-thread buffer kept between calls made Qwen2.5-Coder-0.5B's int8 draft model draft
     * nonsense after compiled engines had run in the same process (2026-12-07, cause not found; filling each fresh
     * buffer with NaNs changes no result, so nothing unwritten is read) */
    float *qf = malloc(sizeof(float) * (tiled * d + 9 * d + padded + rows + rows * padded + padded * d +
                                        (j->bf16 ? n * d : 0)) +
                       sizeof(float *) * (n + tiled));
    float *row = qf + tiled * d, *zero = row + 8 * d, *nothing = zero + d, *sums = nothing + padded;
    float *prob = sums + rows, *kt = prob + rows * padded, *vbuf = kt + padded * d;
    const float **values = (const float **)(vbuf + (j->bf16 ? n * d : 0)), **queries = values + n;
    const vec hidden = (vec){0} - INFINITY;
    int64_t loaded = -1; /* the (row, KV head) whose keys and values kt and `values` hold */
    for (int64_t r = 0; r < tiled; r++) queries[r] = qf + r * d;
    memset(qf, 0, sizeof(float) * tiled * d);
    memset(zero, 0, sizeof(float) * (d + padded)); /* `zero` and `nothing` */
    for (int64_t item = j->first; item < j->last; item++) {
        const int64_t block = item % blocks, kvh = item / blocks % j->kv_heads, b = item / blocks / j->kv_heads;
        const int64_t t0 = block * BLOCK, tn = (j->queries - t0 < BLOCK) ? j->queries - t0 : BLOCK, used = tn * group;
        const int64_t mask0 = b * j->ms[0] + t0 * j->ms[1];
        if (loaded != item / blocks) {
            transposed_keys(kt, row, zero, j, b, kvh, padded);
            value_rows(values, vbuf, j, b, kvh);
            loaded = item / blocks;
        }
        for (int64_t t = 0; t < tn; t++)
            for (int64_t g = 0; g < group; g++)
                memcpy(qf + (t * group + g) * d,
                       row_at(row, j->q, b * j->qs[0] + (kvh * group + g) * j->qs[1] + (t0 + t) * j->qs[2], d, j->bf16),
                       sizeof(float) * d);
        for (int64_t s0 = 0; s0 < padded; s0 += 16) {
            vec m[BLOCK][2];
            lanes seen[BLOCK][2];
            int any = 0;
            for (int64_t t = 0; t < tn; t++)
                for (int i = 0; i < 16; i++) {
                    m[t][i / 8][i % 8] = s0 + i < n ? mask_at(j, mask0 + t * j->ms[1] + s0 + i) : -INFINITY;
                    seen[t][i / 8][i % 8] = m[t][i / 8][i % 8] > MASKED ? -1 : 0;
                    any |= m[t][i / 8][i % 8] > MASKED;
                }
            if (!any) {
                for (int64_t r = 0; r < used; r++)
                    memcpy(prob + r * padded + s0, (vec[2]){hidden, hidden}, 2 * sizeof(vec));
                continue;
            }
            for (int64_t r0 = 0; r0 < used; r0 += 4) {
                vec out[4][2];
                scores_4x16(out, queries + r0, kt + s0 * d, d);
                for (int64_t r = r0; r < r0 + 4 && r < used; r++)
                    for (int h = 0; h < 2; h++) {
                        const int64_t t = r / group;
                        const vec sc = out[r - r0][h] * j->scale + m[t][h];
                        lanes bits, minus;
                        memcpy(&bits, &sc, sizeof bits); memcpy(&minus, &hidden, sizeof minus);
                        bits = (bits & seen[t][h]) | (minus & ~seen[t][h]);
                        memcpy(prob + r * padded + s0 + 8 * h, &bits, sizeof bits);
                    }
            }
        }
        for (int64_t r = 0; r < used; r++) {
            float *p = prob + r * padded, top = -INFINITY;
            for (int64_t s = 0; s < n; s++) top = p[s] > top ? p[s] : top;
            for (int64_t s = 0; s < padded; s += 8) {
                vec x;
                memcpy(&x, p + s, sizeof x);
                x = exp_nonpositive(x - top);
                memcpy(p + s, &x, sizeof x);
            }
            sums[r] = 0.0f;
        }
        for (int64_t s = 0; s < n; s++) /* each row's normaliser key after key; the rows side by side */
            for (int64_t r = 0; r < used; r++) sums[r] += prob[r * padded + s];
        for (int64_t r0 = 0; r0 < used; r0 += 3) {
            const float *p[3];
            for (int r = 0; r < 3; r++) p[r] = r0 + r < used ? prob + (r0 + r) * padded : nothing;
            for (int64_t x0 = 0; x0 < d; x0 += 32) {
                float acc[3][32];
                const int64_t w = d - x0 < 32 ? d - x0 : 32;
                weighted_sums_3(acc, p, values, n, x0, w);
                for (int64_t r = r0; r < r0 + 3 && r < used; r++) {
                    const int64_t t = r / group, g = r % group;
                    const int64_t base = b * j->os[0] + (t0 + t) * j->os[1] + (kvh * group + g) * j->os[2];
                    const float inv = sums[r] > 0 ? 1.0f / sums[r] : 0.0f;
                    for (int64_t x = 0; x < w; x++) store(j->out, base + x0 + x, acc[r - r0][x] * inv, j->bf16);
                }
            }
        }
    }
    free(qf);
}

/* strides: q's 4, k's 4, v's 4, the mask's 3 ([B, T, S]; 0 for a mask shared by the rows), out's 4. */
void ordered_attention(const void *q, const void *k, const void *v, const void *mask, void *out,
                       const int64_t *strides, int64_t batch, int64_t heads, int64_t kv_heads, int64_t queries,
                       int64_t keys, int64_t dim, float scale, int bf16, int mask_bf16, int threads) {
    const int64_t *qs = strides, *ks = strides + 4, *vs = strides + 8, *ms = strides + 12, *os = strides + 15;
    const int64_t items = batch * kv_heads * ((queries + BLOCK - 1) / BLOCK);
#pragma omp parallel num_threads(threads < items ? threads : (int)items)
    {
        const int64_t part = omp_get_thread_num(), parts = omp_get_num_threads();
        Job job = {q, k, v, mask, out, qs, ks, vs, ms, os, heads, kv_heads, queries, keys, dim, scale, bf16, mask_bf16,
                   items * part / parts, items * (part + 1) / parts};
        run(&job);
    }
}
