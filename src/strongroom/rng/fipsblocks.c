/* FIPS 140-2 block tests for strongroom.rng.fips: the same rules and conventions as the numpy
 * version in fips.py (which documents them), in one pass per block so testing keeps up with
 * hardware sources.  Built by scripts/install.sh; fips.py falls back to numpy without it. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define BLOCK_BYTES 2500

enum { F_MONOBIT = 1, F_POKER = 2, F_RUNS = 4, F_LONGRUN = 8, F_CONTINUOUS = 16 };

static const int run_lo[6] = {2315, 1114, 527, 240, 103, 103};
static const int run_hi[6] = {2685, 1386, 723, 384, 209, 209};

/* flags[i] gets the failed tests of block i; *last_bit and *last32 carry state across calls. */
void sr_fips_blocks(const uint8_t *data, size_t nblocks, int *last_bit, uint32_t *last32, int has_last32,
                    uint8_t *flags) {
    for (size_t b = 0; b < nblocks; b++) {
        const uint8_t *p = data + b * BLOCK_BYTES;
        long poker[16];
        long runs[12];
        long ones = 0;
        long rlength = -1;
        int bit = 0, last = *last_bit, longrun = 0;
        uint8_t f = 0;
        memset(poker, 0, sizeof poker);
        memset(runs, 0, sizeof runs);
        for (size_t i = 0; i < BLOCK_BYTES; i += 4) {
            uint32_t w = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 | (uint32_t)p[i + 3] << 24;
            if (has_last32 && w == *last32) f |= F_CONTINUOUS;
            *last32 = w;
            has_last32 = 1;
            for (int k = 0; k < 4; k++) {
                unsigned byte = p[i + k];
                poker[byte >> 4]++;
                poker[byte & 15]++;
                for (int j = 7; j >= 0; j--) {
                    bit = (byte >> j) & 1;
                    ones += bit;
                    if (bit != last) {
                        long slot = (rlength < 5 ? rlength : 5) + 6 * bit;
                        if (slot >= 0) runs[slot]++;
                        else poker[15]++; /* rngtest's runs[-1] is its poker[15] */
                        if (rlength >= 25) longrun = 1;
                        rlength = 0;
                        last = bit;
                    } else {
                        rlength++;
                    }
                }
            }
        }
        runs[(rlength < 5 ? rlength : 5) + 6 * bit]++;
        if (rlength >= 25) longrun = 1;
        *last_bit = last;
        if (ones <= 9725 || ones >= 10275) f |= F_MONOBIT;
        long sumsq = 0;
        for (int i = 0; i < 16; i++) sumsq += poker[i] * poker[i];
        if (sumsq < 1563176 || sumsq > 1576928) f |= F_POKER;
        for (int i = 0; i < 12; i++)
            if (runs[i] < run_lo[i % 6] || runs[i] > run_hi[i % 6]) f |= F_RUNS;
        if (longrun) f |= F_LONGRUN;
        flags[b] = f;
    }
}
