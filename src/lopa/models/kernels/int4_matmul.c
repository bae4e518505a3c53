/* int4 (and int8) weight-only matrix products on AMX tiles, in which every output row depends only on its own input
 * row.
 *
 * w[n, k] = code * scale + low over the group of 32 inputs k belongs to. Codes are stored in panels of 16 outputs,
 * per group 16 tile rows, where tile row p holds inputs 2p and 2p + 1 of each of the 16 outputs side by side, the
 * layout TDPBF16PS takes for its second operand: int4 in 8 chunks of 32 bytes, chunk c's low nibbles tile row 2c
 * and its high nibbles row 2c + 1; int8 (Q8_0's vocabulary) a byte a code, no offsets. A panel is expanded once
 * per call (codes are exact in bf16) and serves every input row; each group is one tile product of up to 16 rows
 * (two groups in flight), and each row then accumulates scale * product + low * (the group's sum of inputs) in
 * fp32, group after group, with the scale and low in fp32 (exact for Q4_0, Q4_1, Q4_K and Q8_0). So 1 to 16 rows
 * cost about the same. Up to VECTOR_ROWS rows skip the tiles: AVX-512 registers compute what a tile computes, in
 * the same order (vector_rows), faster for so few rows. Each output element is computed by the same operations
 * whatever the row count, the row's position in the call or the thread count (a tile's rows are independent): a
 * token verified inside a tree gets the products a one-token step gives, bit for bit.
 * bf16 in and out. Built on CPUs without AMX-BF16 too, where int4_matmul_available() is 0 and lopa uses torch's kernel.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GROUP 32
#define PANEL 16 /* outputs per panel: a tile's 16 fp32 columns */
#define ROWS 16  /* input rows per tile */
#define GROUP_BYTES(bits) ((bits) * GROUP * PANEL / 8) /* a panel's codes for one group */
#ifndef VECTOR_ROWS
#define VECTOR_ROWS 4 /* up to this many rows, registers beat tiles */
#endif

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Whether this process may use AMX tiles (Linux grants them on request). */
int int4_matmul_available(void) { return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0; }

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} __attribute__((packed)) TileConfig;

/* Two groups in flight, each with its tiles: products (rows x 16 fp32) in 0 and 3, inputs (rows x 32 bf16) in 1
 * and 4, codes (16 input pairs x 16 outputs, bf16) in 2 and 5. */
static void configure_tiles(int rows) {
    TileConfig config = {0};
    config.palette = 1;
    for (int t = 0; t < 6; t++) {
        config.bytes_per_row[t] = 64;
        config.rows[t] = t % 3 == 2 ? 16 : (uint8_t)rows;
    }
    _tile_loadconfig(&config);
}

/* Panel `panel`'s codes as bf16 tile rows (exact: 0..15, or -128..127 for int8), every group:
 * out [groups][16 pairs][32]. */
static void expand_panel(const uint8_t *codes, int64_t groups, int64_t panel, uint16_t *out, int bits) {
    const uint8_t *chunk = codes + panel * groups * GROUP_BYTES(bits);
    if (bits == 8) {
        for (int64_t t = 0; t < groups * 16; t++, chunk += 32, out += 32) {
            const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)chunk)));
            const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(chunk + 16))));
            _mm512_storeu_si512(out, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
        return;
    }
    const __m512i bf16_of_code = _mm512_set_epi16(
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4170, 0x4160, 0x4150, 0x4140, 0x4130, 0x4120, 0x4110,
        0x4100, 0x40e0, 0x40c0, 0x40a0, 0x4080, 0x4040, 0x4000, 0x3f80, 0x0000);
    for (int64_t c = 0; c < groups * 8; c++, chunk += 32, out += 64) {
        const __m512i both = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)chunk));
        _mm512_storeu_si512(out, _mm512_permutexvar_epi16(_mm512_and_si512(both, _mm512_set1_epi16(15)), bf16_of_code));
        _mm512_storeu_si512(out + 32, _mm512_permutexvar_epi16(_mm512_srli_epi16(both, 4), bf16_of_code));
    }
}

/* The weights of inputs 4c .. 4c + 3 (tile rows 2c and 2c + 1) of a panel's 16 outputs, from one group's codes. */
static inline void four_inputs(const uint8_t *group, int64_t c, int bits, __m512 w[4]) {
    if (bits == 8) {
        for (int h = 0; h < 2; h++) { /* tile row 2c + h; lane o: output o's inputs 4c + 2h and 4c + 2h + 1 */
            const __m512i lanes = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(group + 64 * c + 32 * h)));
            w[2 * h] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(lanes, 16), 16));
            w[2 * h + 1] = _mm512_cvtepi32_ps(_mm512_srai_epi32(lanes, 16));
        }
        return;
    }
    const __m512 code_value = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    /* lane o: byte 2o (inputs 4c, 4c + 2 of output o) and byte 2o + 1 (inputs 4c + 1, 4c + 3) */
    const __m512i lanes = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(group + 32 * c)));
    w[0] = _mm512_permutexvar_ps(lanes, code_value); /* reads each lane's low 4 bits */
    w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(lanes, 16), code_value);
    w[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(lanes, 4), code_value);
    w[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(lanes, 20), code_value);
}

/* Each group's sum of inputs, per row: sums [rows][groups] (the offsets' share of a product). */
static void group_sums(const uint16_t *x, int64_t rows, int64_t groups, float *sums) {
    for (int64_t i = 0; i < rows * groups; i++) {
        const __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
            _mm256_loadu_si256((const __m256i *)(x + i * GROUP))), 16));
        const __m512 b = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
            _mm256_loadu_si256((const __m256i *)(x + i * GROUP + 16))), 16));
        sums[i] = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
    }
}

/* The tile products for `m` rows of `pp` adjacent panels in AVX-512 registers, with the arithmetic TDPBF16PS
 * performs from a zeroed tile: per output, the products of its even inputs summed in order, those of its odd inputs
 * summed in order, then the two sums added. A product of bf16 and a code is exact in fp32, so an FMA rounds as the
 * tile's add does (denormals flushed to zero, as the tiles flush them). Bit-identical to the tile path (tested) and
 * faster for a few rows, for which the tile path's store and reload per group is latency. One panel's sums are
 * chains of dependent FMAs, each waiting on the last; `pp` panels side by side keep the FMA units busy with
 * independent chains (a 1-row product of one panel at a time ran at half the memory's speed). Called with constant
 * `m` and `pp`, so the compiler keeps every sum in a register. */
static inline __attribute__((always_inline)) void vector_panels(
    const float *xf, const uint8_t *codes, const float *scale, const float *low, const float *sums, uint16_t *y,
    int64_t first, const int m, const int pp, int64_t n_out, int64_t k_in, int bits) {
    const int64_t groups = k_in / GROUP;
    __m512 acc[4][VECTOR_ROWS], even[4][VECTOR_ROWS], odd[4][VECTOR_ROWS], w[4][4];
    for (int p = 0; p < pp; p++)
        for (int r = 0; r < m; r++) acc[p][r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        for (int p = 0; p < pp; p++)
            for (int r = 0; r < m; r++) even[p][r] = odd[p][r] = _mm512_setzero_ps();
        for (int64_t c = 0; c < 8; c++) {
            for (int p = 0; p < pp; p++) four_inputs(codes + ((first + p) * groups + g) * GROUP_BYTES(bits), c, bits, w[p]);
            for (int r = 0; r < m; r++) {
                const float *in = xf + r * k_in + g * GROUP + 4 * c;
                for (int p = 0; p < pp; p++) {
                    even[p][r] = _mm512_fmadd_ps(_mm512_set1_ps(in[0]), w[p][0], even[p][r]);
                    odd[p][r] = _mm512_fmadd_ps(_mm512_set1_ps(in[1]), w[p][1], odd[p][r]);
                    even[p][r] = _mm512_fmadd_ps(_mm512_set1_ps(in[2]), w[p][2], even[p][r]);
                    odd[p][r] = _mm512_fmadd_ps(_mm512_set1_ps(in[3]), w[p][3], odd[p][r]);
                }
            }
        }
        for (int p = 0; p < pp; p++) {
            const int64_t at = ((first + p) * groups + g) * PANEL;
            const __m512 s = _mm512_loadu_ps(scale + at);
            for (int r = 0; r < m; r++) {
                acc[p][r] = _mm512_fmadd_ps(_mm512_add_ps(even[p][r], odd[p][r]), s, acc[p][r]);
                if (low) acc[p][r] = _mm512_fmadd_ps(_mm512_loadu_ps(low + at), _mm512_set1_ps(sums[r * groups + g]), acc[p][r]);
            }
        }
    }
    for (int p = 0; p < pp; p++)
        for (int r = 0; r < m; r++)
            _mm256_storeu_si256((__m256i *)(y + r * n_out + (first + p) * PANEL), (__m256i)_mm512_cvtneps_pbh(acc[p][r]));
}

/* Panels first .. first + pp - 1 for `m` rows: vector_panels with its sizes made constants. */
static void vector_block(const float *xf, const uint8_t *codes, const float *scale, const float *low,
                         const float *sums, uint16_t *y, int64_t first, int m, int pp, int64_t n_out, int64_t k_in,
                         int bits) {
#define CASE(M, PP) \
    if (m == M && pp == PP) return vector_panels(xf, codes, scale, low, sums, y, first, M, PP, n_out, k_in, bits)
    CASE(1, 4); CASE(1, 1); CASE(2, 2); CASE(2, 1); CASE(3, 1); CASE(4, 1);
#undef CASE
}

/* Up to VECTOR_ROWS rows in registers: blocks of panels_at_once(m) panels, then any panels left one at a time. */
static int panels_at_once(int64_t m) { return m == 1 ? 4 : m == 2 ? 2 : 1; }

static void vector_rows(const uint16_t *x, const uint8_t *codes, const float *scale, const float *low,
                        const float *sums, uint16_t *y, int64_t m, int64_t n_out, int64_t k_in, int threads, int bits) {
    const int64_t panels = n_out / PANEL;
    const int pp = panels_at_once(m);
    const int64_t blocks = panels / pp;
    float *xf = malloc(sizeof(float) * m * k_in); /* the inputs in fp32, broadcast one at a time */
    for (int64_t i = 0; i < m * k_in; i++) {
        const uint32_t bits = (uint32_t)x[i] << 16;
        memcpy(xf + i, &bits, sizeof bits);
    }
#pragma omp parallel num_threads(threads)
    {
        const unsigned int csr = _mm_getcsr();
        _mm_setcsr(csr | 0x8040); /* flush denormal inputs and results to zero (DAZ, FTZ) */
#pragma omp for schedule(static)
        for (int64_t b = 0; b < blocks; b++) vector_block(xf, codes, scale, low, sums, y, b * pp, (int)m, pp, n_out, k_in, bits);
#pragma omp for schedule(static)
        for (int64_t panel = blocks * pp; panel < panels; panel++)
            vector_block(xf, codes, scale, low, sums, y, panel, (int)m, 1, n_out, k_in, bits);
        _mm_setcsr(csr);
    }
    free(xf);
}

/* y [m, n_out] = x [m, k_in] @ w.T. x is bf16 with its rows padded to a multiple of min(m, 16) (the padding rows'
 * outputs are not written); k_in a multiple of 64; codes [n_out / 16][k_in / 32][GROUP_BYTES(bits)]; scale, low
 * [n_out / 16][k_in / 32][16] (low NULL: no offsets). */
static void matmul(const uint16_t *x, const uint8_t *codes, const float *scale, const float *low, uint16_t *y,
                   int64_t m, int64_t n_out, int64_t k_in, int threads, int bits) {
    const int64_t groups = k_in / GROUP, panels = n_out / PANEL, rows = m < ROWS ? m : ROWS;
    const int64_t tiles = (m + rows - 1) / rows;
    float *sums = malloc(sizeof(float) * tiles * rows * groups);
    group_sums(x, tiles * rows, groups, sums);
    if (m <= VECTOR_ROWS) {
        vector_rows(x, codes, scale, low, sums, y, m, n_out, k_in, threads, bits);
        free(sums);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        uint16_t *expanded = aligned_alloc(64, groups * GROUP * PANEL * sizeof(uint16_t));
        float *products = aligned_alloc(64, 2 * ROWS * PANEL * sizeof(float)); /* two groups' [16][16] */
        __m512 acc[ROWS];
        configure_tiles((int)rows);
#pragma omp for schedule(static)
        for (int64_t panel = 0; panel < panels; panel++) {
            expand_panel(codes, groups, panel, expanded, bits);
            for (int64_t tile = 0; tile < tiles; tile++) {
                for (int64_t r = 0; r < rows; r++) acc[r] = _mm512_setzero_ps();
                for (int64_t g = 0; g < groups; g += 2) { /* groups is even (checked by the caller) */
                    const uint16_t *inputs = x + tile * rows * k_in + g * GROUP;
                    _tile_zero(0);
                    _tile_zero(3);
                    _tile_loadd(1, inputs, k_in * sizeof(uint16_t));
                    _tile_loadd(2, expanded + g * GROUP * PANEL, 64);
                    _tile_loadd(4, inputs + GROUP, k_in * sizeof(uint16_t));
                    _tile_loadd(5, expanded + (g + 1) * GROUP * PANEL, 64);
                    _tile_dpbf16ps(0, 1, 2);
                    _tile_dpbf16ps(3, 4, 5);
                    _tile_stored(0, products, PANEL * sizeof(float));
                    _tile_stored(3, products + ROWS * PANEL, PANEL * sizeof(float));
                    for (int64_t h = 0; h < 2; h++) {
                        const __m512 s = _mm512_loadu_ps(scale + (panel * groups + g + h) * PANEL);
                        for (int64_t r = 0; r < rows; r++) {
                            const __m512 p = _mm512_load_ps(products + (h * ROWS + r) * PANEL);
                            acc[r] = _mm512_fmadd_ps(p, s, acc[r]);
                            if (low)
                                acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(low + (panel * groups + g + h) * PANEL),
                                                         _mm512_set1_ps(sums[(tile * rows + r) * groups + g + h]), acc[r]);
                        }
                    }
                }
                const int64_t valid = m - tile * rows < rows ? m - tile * rows : rows;
                for (int64_t r = 0; r < valid; r++)
                    _mm256_storeu_si256((__m256i *)(y + (tile * rows + r) * n_out + panel * PANEL),
                                        (__m256i)_mm512_cvtneps_pbh(acc[r]));
            }
        }
        _tile_release();
        free(products);
        free(expanded);
    }
    free(sums);
}

/* 4-bit codes 0..15, two to a byte (Q4_0, Q4_1, Q4_K: w = code * scale + low). */
void int4_matmul(const uint16_t *x, const uint8_t *codes, const float *scale, const float *low, uint16_t *y,
                 int64_t m, int64_t n_out, int64_t k_in, int threads) {
    matmul(x, codes, scale, low, y, m, n_out, k_in, threads, 4);
}

/* 8-bit codes -128..127, a byte each (Q8_0: w = code * scale; low NULL). */
void int8_matmul(const uint16_t *x, const uint8_t *codes, const float *scale, const float *low, uint16_t *y,
                 int64_t m, int64_t n_out, int64_t k_in, int threads) {
    matmul(x, codes, scale, low, y, m, n_out, k_in, threads, 8);
}
#else
int int4_matmul_available(void) { return 0; }
static void unavailable(void) { abort(); } /* never called: int4_matmul_available() is 0 */
void int4_matmul(void) { unavailable(); }
void int8_matmul(void) { unavailable(); }
#endif
