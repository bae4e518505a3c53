/* The Q8_0 vocabulary product on any CPU (the AMX kernel's int8 entry where tiles are missing: AVX2, AVX-512
 * without AMX, Arm), in which every output row depends only on its own input row.
 *
 * w[n, k] = code * scale over the group of 32 inputs k belongs to: int8 codes in int4_matmul.c's panel layout
 * (panels of 16 outputs; per group 16 pairs of inputs, pair p holding inputs 2p and 2p + 1 of each of the 16
 * outputs side by side), fp32 scales [panels][groups][16]. Each thread expands a panel's codes to fp32 once
 * (exact) and then computes every input row against it, two rows at a time, by the same operations: per group, products
 * summed input after input in a lane per output, then scale * sum added to the row's accumulator, group after
 * group. A row's outputs so do not depend on the row count, its place in the call or the thread count: a token
 * verified inside a tree gets the logits a one-token step gives, bit for bit. Vectors of 8 floats (GCC/Clang vector
 * extensions, built for this CPU); little-endian CPUs (x86, Arm). bf16 in and out, arithmetic fp32.
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

/* A panel's codes as fp32 [k_in][2]: per input, its even outputs (0, 2, .., 14), then its odd ones; and its scales
 * [groups][2] in that order. A pair's 32 bytes read as 8 little-endian words hold, in word j, outputs 2j and 2j + 1
 * of inputs 2p and 2p + 1 (bytes: 2j's 2p, 2j's 2p + 1, 2j + 1's 2p, 2j + 1's 2p + 1); shifts sign-extend them. */
static void expand_panel(const int8_t *codes, const float *scale, int64_t k_in, lanes *expanded, lanes *scales) {
    for (int64_t p = 0; p < k_in / 2; p++) {
        words w;
        memcpy(&w, codes + p * 2 * PANEL, sizeof w);
        expanded[4 * p] = __builtin_convertvector((w << 24) >> 24, lanes);
        expanded[4 * p + 1] = __builtin_convertvector((w << 8) >> 24, lanes);
        expanded[4 * p + 2] = __builtin_convertvector((w << 16) >> 24, lanes);
        expanded[4 * p + 3] = __builtin_convertvector(w >> 24, lanes);
    }
    for (int64_t g = 0; g < k_in / GROUP; g++)
        for (int j = 0; j < PANEL / 2; j++) {
            scales[2 * g][j] = scale[g * PANEL + 2 * j];
            scales[2 * g + 1][j] = scale[g * PANEL + 2 * j + 1];
        }
}

/* `count` (1 or 2) input rows (fp32, k_in apart) against an expanded panel: their 16 outputs each, as bf16 (n_out
 * apart). Two rows share each load of the panel; each row gets the same operations in the same order either way. */
static inline __attribute__((always_inline)) void panel_rows(const float *x, int64_t k_in, const lanes *expanded,
                                                             const lanes *scales, int64_t groups, uint16_t *y,
                                                             int64_t n_out, const int count) {
    lanes acc_even[2] = {{0}}, acc_odd[2] = {{0}};
    for (int64_t g = 0; g < groups; g++) {
        lanes even[2] = {{0}}, odd[2] = {{0}};
        for (int64_t i = g * GROUP; i < (g + 1) * GROUP; i++)
            for (int r = 0; r < count; r++) {
                even[r] += expanded[2 * i] * x[r * k_in + i];
                odd[r] += expanded[2 * i + 1] * x[r * k_in + i];
            }
        for (int r = 0; r < count; r++) {
            acc_even[r] += even[r] * scales[2 * g];
            acc_odd[r] += odd[r] * scales[2 * g + 1];
        }
    }
    for (int r = 0; r < count; r++)
        for (int j = 0; j < PANEL / 2; j++) {
            y[r * n_out + 2 * j] = narrow(acc_even[r][j]);
            y[r * n_out + 2 * j + 1] = narrow(acc_odd[r][j]);
        }
}

/* y [m, n_out] = x [m, k_in] @ w.T; the arguments are int4_matmul.c's int8_matmul's (`low` unused: Q8_0 has no
 * offsets), so one caller serves both; n_out a multiple of 16, k_in of 32. */
void q8_matmul(const uint16_t *x, const int8_t *codes, const float *scale, const float *low, uint16_t *y,
               int64_t m, int64_t n_out, int64_t k_in, int threads) {
    (void)low;
    const int64_t groups = k_in / GROUP, panels = n_out / PANEL;
    float *xf = malloc(sizeof(float) * m * k_in);
    for (int64_t i = 0; i < m * k_in; i++) xf[i] = widen(x[i]);
#pragma omp parallel num_threads(threads)
    {
        lanes *expanded = aligned_alloc(64, 2 * sizeof(lanes) * k_in);
        lanes *scales = aligned_alloc(64, 2 * sizeof(lanes) * groups);
#pragma omp for schedule(static)
        for (int64_t panel = 0; panel < panels; panel++) {
            expand_panel(codes + panel * k_in * PANEL, scale + panel * groups * PANEL, k_in, expanded, scales);
            uint16_t *out = y + panel * PANEL;
            int64_t r = 0;
            for (; r + 2 <= m; r += 2) panel_rows(xf + r * k_in, k_in, expanded, scales, groups, out + r * n_out, n_out, 2);
            if (r < m) panel_rows(xf + r * k_in, k_in, expanded, scales, groups, out + r * n_out, n_out, 1);
        }
        free(scales);
        free(expanded);
    }
    free(xf);
}
