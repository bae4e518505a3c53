/* Attention whose every output row depends only on its query and the keys it may see, in order.
 *
 * Each (row, query, query head) is computed from its own visible keys (additive mask above MASKED) in slot
 * order: each score is lane-wise multiply-adds then a fixed tree over the lanes (dot), probabilities come
 * from one fixed exp, and the softmax's normaliser and the weighted sum of values accumulate key after key. A masked key
 * contributes nothing (its probability is exactly 0, its value is skipped), so a query gets the same
 * arithmetic whether it is verified alone, inside a tree of any shape (ancestors at other slots, siblings
 * between them, a longer key range), or beside other rows of a batch: a tree's logits are bit-identical to
 * one-token steps. Work items are (row, KV head, block of queries): a block shares each key row it reads.
 * Inputs and output are fp32 or bf16 (dtype 0 / 1), the mask fp32 or bf16 (mask_bf16), each with a unit last
 * stride, the head dimension a multiple of LANES; arithmetic is fp32.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LANES 16
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

typedef float vec __attribute__((vector_size(8 * sizeof(float)))); /* half of LANES: AVX2's width, native everywhere */
typedef int32_t lanes __attribute__((vector_size(8 * sizeof(int32_t))));

/* q . k over d (a multiple of LANES): per lane l of LANES, the products q[x + l] * k[x + l] multiply-added in order of
 * x, then a fixed tree over the lanes: lane l += lane l + w for w = 8, 4, 2, 1 (kept as two halves of 8, so no
 * vector wider than AVX2's is emulated through memory; lanes past w only feed unused lanes). */
static inline float dot(const float *q, const float *k, int64_t d) {
    vec low = {0}, high = {0}, a, b;
    for (int64_t x = 0; x < d; x += LANES) {
        memcpy(&a, q + x, sizeof a); memcpy(&b, k + x, sizeof b);
        low += a * b;
        memcpy(&a, q + x + 8, sizeof a); memcpy(&b, k + x + 8, sizeof b);
        high += a * b;
    }
    vec sum = low + high;
    sum += __builtin_shuffle(sum, (lanes){4, 5, 6, 7, 4, 5, 6, 7});
    sum += __builtin_shuffle(sum, (lanes){2, 3, 2, 3, 2, 3, 2, 3});
    sum += __builtin_shuffle(sum, (lanes){1, 1, 1, 1, 1, 1, 1, 1});
    return sum[0];
}

/* acc += p * v over d (a multiple of LANES), lane-wise. */
static inline void axpy(float *acc, float p, const float *v, int64_t d) {
    vec a, b;
    for (int64_t x = 0; x < d; x += 8) {
        memcpy(&a, acc + x, sizeof a); memcpy(&b, v + x, sizeof b);
        a += p * b;
        memcpy(acc + x, &a, sizeof a);
    }
}

/* e^x for x <= 0 (Cephes' expf polynomial, ~1 ulp); exactly 0 below -87. One definition everywhere. */
static inline float exp_nonpositive(float x) {
    const float n = rintf(x * 1.44269504088896341f);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    const int32_t e = x < -87.0f ? 0 : (int32_t)n + 127;
    uint32_t bits = (uint32_t)e << 23; float scale; memcpy(&scale, &bits, 4);
    return x < -87.0f ? 0.0f : p * scale;
}

static void run(const Job *j) {
    const int64_t group = j->heads / j->kv_heads, d = j->dim, n = j->keys, blocks = (j->queries + BLOCK - 1) / BLOCK;
    const int64_t rows = BLOCK * group;
    float *qf = malloc(sizeof(float) * (rows * d + d + rows * d + rows * n + rows));
    float *row = qf + rows * d, *acc = row + d, *prob = acc + rows * d, *total = prob + rows * n;
    for (int64_t item = j->first; item < j->last; item++) {
        const int64_t block = item % blocks, kvh = item / blocks % j->kv_heads, b = item / blocks / j->kv_heads;
        const int64_t t0 = block * BLOCK, tn = (j->queries - t0 < BLOCK) ? j->queries - t0 : BLOCK;
        const int64_t mask0 = b * j->ms[0] + t0 * j->ms[1];
        for (int64_t t = 0; t < tn; t++)
            for (int64_t g = 0; g < group; g++)
                memcpy(qf + (t * group + g) * d,
                       row_at(row, j->q, b * j->qs[0] + (kvh * group + g) * j->qs[1] + (t0 + t) * j->qs[2], d, j->bf16),
                       sizeof(float) * d);
        for (int64_t r = 0; r < tn * group; r++) total[r] = -INFINITY; /* the running max, then the normaliser */
        for (int64_t s = 0; s < n; s++) {
            int any = 0;
            for (int64_t t = 0; t < tn; t++) any |= mask_at(j, mask0 + t * j->ms[1] + s) > MASKED;
            if (!any) {
                for (int64_t r = 0; r < tn * group; r++) prob[r * n + s] = -INFINITY;
                continue;
            }
            const float *key = row_at(row, j->k, b * j->ks[0] + kvh * j->ks[1] + s * j->ks[2], d, j->bf16);
            for (int64_t t = 0; t < tn; t++) {
                const float m = mask_at(j, mask0 + t * j->ms[1] + s);
                for (int64_t g = 0; g < group; g++) {
                    const int64_t r = t * group + g;
                    const float sc = m > MASKED ? dot(qf + r * d, key, d) * j->scale + m : -INFINITY;
                    prob[r * n + s] = sc;
                    if (sc > total[r]) total[r] = sc;
                }
            }
        }
        for (int64_t r = 0; r < tn * group; r++) {
            float *p = prob + r * n, sum = 0.0f;
            const float top = total[r];
            for (int64_t s = 0; s < n; s++) p[s] = exp_nonpositive(p[s] - top);
            for (int64_t s = 0; s < n; s++) sum += p[s];
            total[r] = sum;
        }
        memset(acc, 0, sizeof(float) * tn * group * d);
        for (int64_t s = 0; s < n; s++) {
            int any = 0;
            for (int64_t t = 0; t < tn; t++) any |= mask_at(j, mask0 + t * j->ms[1] + s) > MASKED;
            if (!any) continue;
            const float *value = row_at(row, j->v, b * j->vs[0] + kvh * j->vs[1] + s * j->vs[2], d, j->bf16);
            for (int64_t r = 0; r < tn * group; r++) {
                const float p = prob[r * n + s];
                if (p == 0.0f) continue;
                axpy(acc + r * d, p, value, d);
            }
        }
        for (int64_t t = 0; t < tn; t++)
            for (int64_t g = 0; g < group; g++) {
                const int64_t r = t * group + g, base = b * j->os[0] + (t0 + t) * j->os[1] + (kvh * group + g) * j->os[2];
                const float inv = total[r] > 0 ? 1.0f / total[r] : 0.0f;
                for (int64_t x = 0; x < d; x++) store(j->out, base + x, acc[r * d + x] * inv, j->bf16);
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
