/* int4 and int8 weight-only matrix products on any CPU (where int4_matmul.c's AMX tiles are missing: AVX2, AVX-512
 * without AMX, Arm), in which every output row depends only on its own input row.
 *
 * w[n, k] = code * scale + low over the group of 32 inputs k belongs to (int8, Q8_0's vocabulary: no low). The codes
 * are in int4_matmul.c's panel layout: panels of 16 outputs, per group 16 pairs of inputs, pair p holding inputs 2p
 * and 2p + 1 of each of the 16 outputs side by side (int8: a byte a code; int4: chunk c of 32 bytes holds pairs 2c
 * in its low nibbles and 2c + 1 in its high ones); fp32 scales and lows [panels][groups][16]. Each thread expands a
 * panel's codes to fp32 once (exact) and then computes every input row against it, two rows at a time, by the same
 * operations: per group, products summed in four chains a row (even and odd outputs, even and odd inputs, each
 * input after input), the two input chains added, then scale * sum and low * (the row's sum of the group's inputs)
 * added to the row's accumulator, group after group. A row's outputs so do not depend on the row count, its place
 * in the call or the thread count: a token verified inside a tree gets the products a one-token step gives, bit for
 * bit. Vectors of 8 floats (GCC/Clang vector extensions, built for this CPU); little-endian CPUs (x86, Arm). bf16
 * in and out, arithmetic fp32.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GROUP 32
#define PANEL 16

typedef float lanes __attribute__((vector_size(8 * sizeof(float)))); /* half a panel: AVX2's width, 2 NEON registers */
typedef int32_t words __attribute__((vector_size(8 * sizeof(int32_t))));

static inline float widen(uint16_t bf16) {
    const uint32_t bits = (uint32_t)bf16 << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t narrow(float f) { /* round to nearest even, as torch does; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The weights of input 4c + j (j = 0 .. 3) of a panel's 16 outputs, from its codes: its even outputs (0, 2, .., 14)
 * and its odd ones, exact in fp32. 32 bytes read as 8 little-endian words hold, in word i, outputs 2i and 2i + 1 of
 * two inputs: int8 (a pair of inputs), bytes 2i's first, 2i's second, 2i + 1's first, 2i + 1's second input (shifts
 * sign-extend them; four inputs are two pairs); int4, the same order of bytes for inputs 4c and 4c + 1 in the low
 * nibbles and 4c + 2 and 4c + 3 in the high ones. */
static inline __attribute__((always_inline)) void input_weights(const uint8_t *codes, int64_t c, int j, const int bits,
                                                                lanes *even, lanes *odd) {
    words w;
    if (bits == 8) {
        memcpy(&w, codes + 64 * c + 32 * (j / 2), sizeof w);
        *even = __builtin_convertvector((w << (24 - 8 * (j % 2))) >> 24, lanes);
        *odd = __builtin_convertvector((w << (8 - 8 * (j % 2))) >> 24, lanes);
        return;
    }
    memcpy(&w, codes + 32 * c, sizeof w);
    const int shift = 8 * (j % 2) + 4 * (j / 2);
    *even = __builtin_convertvector((w >> shift) & 15, lanes);
    *odd = __builtin_convertvector((w >> (shift + 16)) & 15, lanes);
}

/* A panel's scales (or lows) [groups][16] as [groups][2]: even outputs, then odd ones. */
static void split_outputs(const float *values, int64_t groups, lanes *out) {
    for (int64_t g = 0; g < groups; g++)
        for (int j = 0; j < PANEL / 2; j++) {
            out[2 * g][j] = values[g * PANEL + 2 * j];
            out[2 * g + 1][j] = values[g * PANEL + 2 * j + 1];
        }
}

/* `count` (1 or 2) input rows (fp32, k_in apart; `sums` their groups' sums, `groups` apart) against a panel's
 * `bits`-bit codes: their 16 outputs each, as bf16 (n_out apart). Two rows share each decoded weight; each row gets
 * the same operations in the same order either way. */
static inline __attribute__((always_inline)) void panel_rows(const float *x, const float *sums, int64_t k_in,
                                                             const uint8_t *codes, const int bits, const lanes *scales,
                                                             const lanes *lows, uint16_t *y, int64_t n_out,
                                                             const int count) {
    lanes acc[2][2] = {{{0}}}; /* [row][output parity] */
    for (int64_t g = 0; g < k_in / GROUP; g++) {
        lanes sum[2][2][2] = {{{{0}}}}; /* [row][output parity][input parity] */
        for (int64_t c = g * GROUP / 4; c < (g + 1) * GROUP / 4; c++)
            for (int j = 0; j < 4; j++) {
                lanes even, odd;
                input_weights(codes, c, j, bits, &even, &odd);
                for (int r = 0; r < count; r++) {
                    sum[r][0][j % 2] += even * x[r * k_in + 4 * c + j];
                    sum[r][1][j % 2] += odd * x[r * k_in + 4 * c + j];
                }
            }
        for (int r = 0; r < count; r++)
            for (int o = 0; o < 2; o++) {
                acc[r][o] += (sum[r][o][0] + sum[r][o][1]) * scales[2 * g + o];
                if (lows) acc[r][o] += lows[2 * g + o] * sums[r * (k_in / GROUP) + g];
            }
    }
    for (int r = 0; r < count; r++)
        for (int j = 0; j < PANEL / 2; j++) {
            y[r * n_out + 2 * j] = narrow(acc[r][0][j]);
            y[r * n_out + 2 * j + 1] = narrow(acc[r][1][j]);
        }
}

/* y [m, n_out] = x [m, k_in] @ w.T for `bits`-bit codes; low NULL: no offsets. n_out a multiple of 16, k_in of 32. */
static inline __attribute__((always_inline)) void matmul(const uint16_t *x, const uint8_t *codes, const float *scale,
                                                         const float *low, uint16_t *y, int64_t m, int64_t n_out,
                                                         int64_t k_in, int threads, const int bits) {
    const int64_t groups = k_in / GROUP, panels = n_out / PANEL;
    float *xf = malloc(sizeof(float) * m * k_in);
    float *sums = malloc(sizeof(float) * m * groups);
    for (int64_t i = 0; i < m * k_in; i++) xf[i] = widen(x[i]);
    for (int64_t r = 0; low && r < m * groups; r++) { /* each group's inputs summed in order (the lows' share) */
        float s = 0;
        for (int64_t i = 0; i < GROUP; i++) s += xf[r * GROUP + i];
        sums[r] = s;
    }
#pragma omp parallel num_threads(threads)
    {
        lanes *scales = aligned_alloc(64, 2 * sizeof(lanes) * groups);
        lanes *lows = low ? aligned_alloc(64, 2 * sizeof(lanes) * groups) : NULL;
#pragma omp for schedule(static)
        for (int64_t panel = 0; panel < panels; panel++) {
            const uint8_t *panel_codes = codes + panel * k_in * PANEL * bits / 8;
            split_outputs(scale + panel * groups * PANEL, groups, scales);
            if (low) split_outputs(low + panel * groups * PANEL, groups, lows);
            uint16_t *out = y + panel * PANEL;
            int64_t r = 0;
            for (; r + 2 <= m; r += 2)
                panel_rows(xf + r * k_in, sums + r * groups, k_in, panel_codes, bits, scales, lows, out + r * n_out, n_out, 2);
            if (r < m)
                panel_rows(xf + r * k_in, sums + r * groups, k_in, panel_codes, bits, scales, lows, out + r * n_out, n_out, 1);
        }
        free(lows);
        free(scales);
    }
    free(sums);
    free(xf);
}

/* 4-bit codes 0..15, two to a byte (Q4_0, Q4_1, Q4_K: w = code * scale + low). int4_matmul.c's arguments. */
void panel_int4_matmul(const uint16_t *x, const uint8_t *codes, const float *scale, const float *low, uint16_t *y,
                       int64_t m, int64_t n_out, int64_t k_in, int threads) {
    matmul(x, codes, scale, low, y, m, n_out, k_in, threads, 4);
}

/* 8-bit codes -128..127, a byte each (Q8_0: w = code * scale; low NULL). */
void panel_int8_matmul(const uint16_t *x, const uint8_t *codes, const float *scale, const float *low, uint16_t *y,
                       int64_t m, int64_t n_out, int64_t k_in, int threads) {
    matmul(x, codes, scale, low, y, m, n_out, k_in, threads, 8);
}
