/* FIPS 140-2 block tests for strongroom.rng.fips: the same rules and conventions as the numpy
 * version in fips.py (which documents them), a byte at a time with tables so testing keeps up
 * with hardware sources.  Built by scripts/install.sh; fips.py falls back to numpy without it. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define BLOCK_BYTES 2500

enum { F_MONOBIT = 1, F_POKER = 2, F_RUNS = 4, F_LONGRUN = 8, F_CONTINUOUS = 16 };

static const int run_lo[6] = {2315, 1114, 527, 240, 103, 103};
static const int run_hi[6] = {2685, 1386, 723, 384, 209, 209};

/* Per byte value, most significant bit first: its first and last bit, the length of its leading
 * and trailing runs, its ones, and the run slots of the runs that start and end inside it (a run
 * is filed under the bit that ends it, as rngtest does). */
static struct {
    uint8_t msb, lsb, lead, trail, ones, ninner;
    uint8_t inner[6];
} tab[256];
static int tab_ready;

static void build_tables(void) {
    for (int v = 0; v < 256; v++) {
        int bits[8], changes[8], nch = 0, ones = 0;
        for (int j = 0; j < 8; j++) {
            bits[j] = (v >> (7 - j)) & 1;
            ones += bits[j];
            if (j > 0 && bits[j] != bits[j - 1]) changes[nch++] = j;
        }
        tab[v].msb = (uint8_t)bits[0];
        tab[v].lsb = (uint8_t)bits[7];
        tab[v].ones = (uint8_t)ones;
        tab[v].lead = (uint8_t)(nch ? changes[0] : 8);
        tab[v].trail = (uint8_t)(nch ? 8 - changes[nch - 1] : 8);
        tab[v].ninner = 0;
        for (int c = 1; c < nch; c++) { /* the run from changes[c-1] up to changes[c] */
            int rlen = changes[c] - changes[c - 1] - 1;
            tab[v].inner[tab[v].ninner++] = (uint8_t)((rlen < 5 ? rlen : 5) + 6 * bits[changes[c]]);
        }
    }
    tab_ready = 1;
}

/* flags[i] gets the failed tests of block i; *last_bit and *last32 carry state across calls. */
void sr_fips_blocks(const uint8_t *data, size_t nblocks, int *last_bit, uint32_t *last32, int has_last32,
                    uint8_t *flags) {
    if (!tab_ready) build_tables();
    for (size_t b = 0; b < nblocks; b++) {
        const uint8_t *p = data + b * BLOCK_BYTES;
        long poker[16] = {0}, runs[12] = {0}, ones = 0;
        long r = -1; /* rngtest's rlength: length of the open run minus one */
        int last = *last_bit, longrun = 0;
        uint8_t f = 0;
        for (size_t i = 0; i < BLOCK_BYTES; i += 4) {
            uint32_t w = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 | (uint32_t)p[i + 3] << 24;
            if (has_last32 && w == *last32) f |= F_CONTINUOUS;
            *last32 = w;
            has_last32 = 1;
        }
        for (size_t i = 0; i < BLOCK_BYTES; i++) {
            unsigned v = p[i];
            poker[v >> 4]++;
            poker[v & 15]++;
            ones += tab[v].ones;
            int msb = tab[v].msb, lead = tab[v].lead;
            if (msb == last) {
                r += lead; /* the open run goes on through the leading bits */
                if (lead == 8) continue;
                /* it ends at the first change, filed under the new bit */
                runs[(r < 5 ? r : 5) + 6 * (1 - msb)]++;
                if (r >= 25) longrun = 1;
            } else {
                /* the open run ends on this byte's first bit */
                long slot = (r < 5 ? r : 5) + 6 * msb;
                if (slot >= 0) runs[slot]++;
                else poker[15]++; /* rngtest's runs[-1] is its poker[15] */
                if (r >= 25) longrun = 1;
                if (lead == 8) {
                    r = 7;
                    last = msb;
                    continue;
                }
                runs[(lead - 1 < 5 ? lead - 1 : 5) + 6 * (1 - msb)]++;
            }
            for (int k = 0; k < tab[v].ninner; k++) runs[tab[v].inner[k]]++;
            r = tab[v].trail - 1;
            last = tab[v].lsb;
        }
        runs[(r < 5 ? r : 5) + 6 * last]++; /* the last, possibly incomplete, run */
        if (r >= 25) longrun = 1;
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
