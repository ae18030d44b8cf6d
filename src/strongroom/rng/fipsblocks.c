/* FIPS 140-2 block tests for strongroom.rng.fips: the same rules and conventions as the numpy
 * version in fips.py (which documents them), computed bit-parallel on 64-bit words so testing
 * keeps up with hardware sources: a run of length >= k starts where a run starts and the next
 * k bits agree, which is a few shifts, ANDs and popcounts per word and no data-dependent branch.
 * Built by the package build (setup.py) into libsrrng.so; fips.py falls back to numpy without it. */
#include <stddef.h>
#include <stdint.h>

#define BLOCK_BYTES 2500
#define FULL_WORDS 312 /* 312 * 64 = 19968 bits, then 32 bits in word 312 */
#define NWORDS 314     /* one more word of zero padding so every shift can read word i + 1 */

enum { F_MONOBIT = 1, F_POKER = 2, F_RUNS = 4, F_LONGRUN = 8, F_CONTINUOUS = 16 };

static const long run_lo[6] = {2315, 1114, 527, 240, 103, 103};
static const long run_hi[6] = {2685, 1386, 723, 384, 209, 209};

static inline uint64_t be64(const uint8_t *p) {
    uint64_t v;
    __builtin_memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* bits i+k.. of the stream at word i (most significant bit first), 0 < k < 64 */
static inline uint64_t ahead(const uint64_t *x, size_t i, int k) { return x[i] << k | x[i + 1] >> (64 - k); }

/* ge[k-1] += runs of set bits of length >= k (k = 1..6) in x; returns 1 if one is >= 26 bits long.
 * Runs start at a set bit whose predecessor is clear; the block start counts as a start. */
static inline __attribute__((always_inline)) int count_runs(const uint64_t *x, long ge[6]) {
    uint64_t long26 = 0;
    uint64_t carry = 0; /* the last bit of the previous word */
    for (size_t i = 0; i < FULL_WORDS + 1; i++) {
        uint64_t starts = x[i] & ~(x[i] >> 1 | carry << 63);
        carry = x[i] & 1;
        uint64_t a = x[i];
        ge[0] += __builtin_popcountll(starts & a);
        for (int k = 1; k < 6; k++) {
            a &= ahead(x, i, k);
            ge[k] += __builtin_popcountll(starts & a);
        }
        /* is a run >= 26 bits under way at any bit of this word? (no branch: it is not rare
         * enough among 64 starting points to predict) */
        unsigned __int128 v = (unsigned __int128)x[i] << 64 | x[i + 1];
        unsigned __int128 a2 = v & v << 1, a4 = a2 & a2 << 2, a8 = a4 & a4 << 4;
        unsigned __int128 a16 = a8 & a8 << 8, a26 = a16 & a8 << 16 & a2 << 24;
        long26 |= (uint64_t)(a26 >> 64);
    }
    return long26 != 0;
}

/* Bumped whenever an entry point of libsrrng.so changes its signature. */
int sr_rng_abi_version(void) { return 2; }

/* flags[i] gets the failed tests of block i; *last_bit and *last32 carry state across calls.
 * Returns 0, or -3 when data_len or flags_len is too small for nblocks (nothing is touched).
 * Cloned per CPU: a popcnt build where the CPU has the instruction, a portable one elsewhere,
 * chosen at load time, so the library runs on any x86-64. */
__attribute__((target_clones("popcnt", "default")))
int sr_fips_blocks(const uint8_t *data, size_t data_len, size_t nblocks, int *last_bit, uint32_t *last32,
                   int has_last32, uint8_t *flags, size_t flags_len) {
    if (nblocks > flags_len || nblocks > data_len / BLOCK_BYTES) return -3;
    uint64_t ones_w[NWORDS], zeros_w[NWORDS];
    for (size_t b = 0; b < nblocks; b++) {
        const uint8_t *p = data + b * BLOCK_BYTES;
        uint8_t f = 0;

        for (size_t i = 0; i < BLOCK_BYTES; i += 4) { /* continuous test, little-endian words */
            uint32_t w = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 | (uint32_t)p[i + 3] << 24;
            if (has_last32 && w == *last32) f |= F_CONTINUOUS;
            *last32 = w;
            has_last32 = 1;
        }

        long ones = 0;
        for (size_t i = 0; i < FULL_WORDS; i++) {
            ones_w[i] = be64(p + 8 * i);
            zeros_w[i] = ~ones_w[i];
            ones += __builtin_popcountll(ones_w[i]);
        }
        uint64_t tail = (uint64_t)p[2496] << 56 | (uint64_t)p[2497] << 48 | (uint64_t)p[2498] << 40 | (uint64_t)p[2499] << 32;
        ones_w[FULL_WORDS] = tail;
        zeros_w[FULL_WORDS] = ~tail & 0xFFFFFFFF00000000ull; /* padding is neither ones nor zeros */
        ones_w[FULL_WORDS + 1] = zeros_w[FULL_WORDS + 1] = 0;
        ones += __builtin_popcountll(tail);

        long hist[256] = {0}, poker[16] = {0};
        for (size_t i = 0; i < BLOCK_BYTES; i++) hist[p[i]]++;
        for (int v = 0; v < 256; v++) {
            poker[v >> 4] += hist[v];
            poker[v & 15] += hist[v];
        }

        /* runs[min(len,6) - 1 + 6 * e] where e is the bit that ends the run: the other bit, except
         * for the block's last run, which rngtest files under its own bit. */
        long ge1[6] = {0}, ge0[6] = {0}, runs[12];
        int longrun = count_runs(ones_w, ge1) | count_runs(zeros_w, ge0);
        for (int k = 0; k < 6; k++) {
            runs[k] = ge1[k] - (k < 5 ? ge1[k + 1] : 0);
            runs[6 + k] = ge0[k] - (k < 5 ? ge0[k + 1] : 0);
        }
        int end_bit = p[2499] & 1, len = 0;
        for (int bit = 19999; bit >= 0 && ((p[bit >> 3] >> (7 - (bit & 7))) & 1) == end_bit; bit--) len++;
        int slot = (len < 6 ? len : 6) - 1;
        runs[slot + 6 * (1 - end_bit)]--;
        runs[slot + 6 * end_bit]++;

        /* rngtest closes a phantom run of length 0 when a block's first bit differs from the last
         * bit before it: filed at runs[5] for a 1, and at runs[-1] (its poker[15]) for a 0. */
        int first_bit = p[0] >> 7;
        if (first_bit != *last_bit) {
            if (first_bit) runs[5]++;
            else poker[15]++;
        }
        *last_bit = end_bit;

        if (ones <= 9725 || ones >= 10275) f |= F_MONOBIT;
        long sumsq = 0;
        for (int i = 0; i < 16; i++) sumsq += poker[i] * poker[i];
        if (sumsq < 1563176 || sumsq > 1576928) f |= F_POKER;
        for (int i = 0; i < 12; i++)
            if (runs[i] < run_lo[i % 6] || runs[i] > run_hi[i % 6]) f |= F_RUNS;
        if (longrun) f |= F_LONGRUN;
        flags[b] = f;
    }
    return 0;
}
