/* Spike (issue 37, not lopa code): what int4 products cost on AVX2 with the activations quantized to int8 per 32
 * inputs (llama.cpp's Q4_1 x Q8_1 scheme: integer dot products with maddubs), against lopa's portable kernel
 * (kernels/panel_matmul.c: bf16 activations, fp32 FMAs), for SmolLM2's 210 decoder products at 1-16 rows, 2 threads.
 * Weights here are output-major Q4_1-like blocks (16 bytes of nibbles, fp32 scale and min per 32 inputs); each row of
 * x is quantized once per call (scale = max|x| / 127 per 32); every row's arithmetic is the same whatever the row
 * count (integer sums exact, then fixed fp32 steps), so such a kernel would keep trees equal to one-token steps, but
 * its outputs differ from the bf16-activation kernel's (another approximation). Time only; results not checked
 * against a reference beyond a coarse relative error printed for one layer.
 * Build and run: gcc -O3 -march=native -fopenmp spike.c ../../../src/lopa/models/kernels/panel_matmul.c -o spike -lm && ./spike
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void panel_int4_matmul(const uint16_t *x, const uint8_t *codes, const float *scale, const float *low, uint16_t *y,
                       int64_t m, int64_t n_out, int64_t k_in, int threads);

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

/* y [m][n] = x [m][k] @ w.T; w: codes [n][k/2] (byte j of a block: inputs j and j + 16), scale, low [n][k/32]. */
static void int8_act_matmul(const float *x, const uint8_t *codes, const float *scale, const float *low, float *y,
                            int m, int n, int k) {
    const int blocks = k / 32;
    int8_t *xq = aligned_alloc(32, (size_t)m * k);
    float *xd = malloc(sizeof(float) * m * blocks), *xs = malloc(sizeof(float) * m * blocks);
    for (int r = 0; r < m; r++)
        for (int b = 0; b < blocks; b++) {
            const float *in = x + (size_t)r * k + b * 32;
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(in[i]));
            const float d = amax / 127, inv = d ? 1 / d : 0;
            int sum = 0;
            for (int i = 0; i < 32; i++) { const int q = (int)lrintf(in[i] * inv); xq[(size_t)r * k + b * 32 + i] = (int8_t)q; sum += q; }
            xd[r * blocks + b] = d;
            xs[r * blocks + b] = d * sum;
        }
#pragma omp parallel for schedule(static) num_threads(2)
    for (int o = 0; o < n; o++) {
        __m256 acc[16];
        float mins[16];
        for (int r = 0; r < m; r++) { acc[r] = _mm256_setzero_ps(); mins[r] = 0; }
        for (int b = 0; b < blocks; b++) {
            const __m128i packed = _mm_loadu_si128((const __m128i *)(codes + ((size_t)o * blocks + b) * 16));
            const __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(15));
            const float dw = scale[o * blocks + b], mw = low[o * blocks + b];
            for (int r = 0; r < m; r++) {
                const __m256i xv = _mm256_load_si256((const __m256i *)(xq + (size_t)r * k + b * 32));
                const __m256i dots = _mm256_madd_epi16(_mm256_maddubs_epi16(w, xv), _mm256_set1_epi16(1));
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), _mm256_set1_ps(dw * xd[r * blocks + b]), acc[r]);
                mins[r] += mw * xs[r * blocks + b];
            }
        }
        for (int r = 0; r < m; r++) {
            __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
            s = _mm_hadd_ps(s, s); s = _mm_hadd_ps(s, s);
            y[(size_t)r * n + o] = _mm_cvtss_f32(s) + mins[r];
        }
    }
    free(xs); free(xd); free(xq);
}

int main(void) {
    const int shapes[7][2] = {{576, 576}, {576, 576}, {192, 576}, {192, 576}, {1536, 576}, {1536, 576}, {576, 1536}};
    uint8_t *codes[7]; float *scale[7], *low[7];
    for (int l = 0; l < 7; l++) {
        const int n = shapes[l][0], k = shapes[l][1];
        codes[l] = malloc((size_t)n * k / 2); scale[l] = malloc(sizeof(float) * n * k / 32); low[l] = malloc(sizeof(float) * n * k / 32);
        for (size_t i = 0; i < (size_t)n * k / 2; i++) codes[l][i] = rand();
        for (int i = 0; i < n * k / 32; i++) { scale[l][i] = 0.01f; low[l][i] = -0.08f; }
    }
    float *xf = malloc(sizeof(float) * 16 * 1536), *yf = malloc(sizeof(float) * 16 * 1536);
    uint16_t *xb = malloc(2 * 16 * 1536), *yb = malloc(2 * 16 * 1536);
    for (int i = 0; i < 16 * 1536; i++) { xf[i] = (rand() / (float)RAND_MAX - 0.5f) * 4; uint32_t u; memcpy(&u, xf + i, 4); xb[i] = u >> 16; }
    printf("rows  int8 activations  panel kernel (bf16)  ratio   (ms for 30 x 7 products, best of 7)\n");
    for (int m = 1; m <= 16; m *= 2) {
        double best[2] = {1e9, 1e9};
        for (int rep = 0; rep < 7; rep++)
            for (int which = 0; which < 2; which++) {
                const double t = now();
                for (int layer = 0; layer < 30; layer++)
                    for (int l = 0; l < 7; l++) {
                        if (which == 0) int8_act_matmul(xf, codes[l], scale[l], low[l], yf, m, shapes[l][0], shapes[l][1]);
                        else panel_int4_matmul(xb, codes[l], scale[l], low[l], yb, m, shapes[l][0], shapes[l][1], 2);
                    }
                const double dt = now() - t;
                if (dt < best[which]) best[which] = dt;
            }
        printf("%4d  %13.2f ms  %16.2f ms  %5.2f\n", m, best[0] * 1e3, best[1] * 1e3, best[0] / best[1]);
    }
    return 0;
}
