/* The sums behind ent's figures (strongroom.rng.stats), accumulated over a stream in one pass:
 * byte counts, the serial products of successive bytes and the Monte Carlo hits of 6-byte groups.
 * stats.py turns them into entropy, chi-square, mean, pi and serial correlation. */
#include <stddef.h>
#include <stdint.h>

struct sr_ent {
    uint64_t counts[256];
    uint64_t serial;  /* sum of a[i] * a[i + 1] so far (the circular last * first is added at the end) */
    uint64_t inside;  /* Monte Carlo groups inside the circle */
    uint64_t groups;  /* whole 6-byte groups */
    uint32_t first, last, started, npart;
    uint8_t part[8];  /* the bytes of an unfinished group */
};

static const uint64_t RADIUS2 = (uint64_t)16777215 * 16777215; /* (256^3 - 1)^2 */

static inline int in_circle(const uint8_t *g) {
    uint64_t x = (uint64_t)g[0] << 16 | (uint64_t)g[1] << 8 | g[2];
    uint64_t y = (uint64_t)g[3] << 16 | (uint64_t)g[4] << 8 | g[5];
    return x * x + y * y <= RADIUS2;
}

/* Returns 0, or -3 for a state no call of this function leaves behind (nothing is touched). */
int sr_ent_update(struct sr_ent *st, const uint8_t *p, size_t n) {
    if (st->npart >= 6) return -3;
    if (n == 0) return 0;
    /* four histograms, so repeated values do not wait on each other's stores */
    uint32_t h[4][256] = {{0}};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        h[0][p[i]]++;
        h[1][p[i + 1]]++;
        h[2][p[i + 2]]++;
        h[3][p[i + 3]]++;
    }
    for (; i < n; i++) h[0][p[i]]++;
    for (int v = 0; v < 256; v++) st->counts[v] += (uint64_t)h[0][v] + h[1][v] + h[2][v] + h[3][v];
    /* (a chunk of up to 2^32 - 1 bytes per call keeps the uint32 counts exact: stats.py ensures it) */

    uint64_t s = 0;
    for (size_t j = 0; j + 1 < n; j++) s += (uint32_t)p[j] * p[j + 1];
    if (st->started) s += (uint64_t)st->last * p[0];
    else {
        st->first = p[0];
        st->started = 1;
    }
    st->serial += s;
    st->last = p[n - 1];

    size_t k = 0;
    while (st->npart && k < n) { /* finish a group begun in the previous call */
        st->part[st->npart++] = p[k++];
        if (st->npart == 6) {
            st->inside += in_circle(st->part);
            st->groups++;
            st->npart = 0;
        }
    }
    uint64_t inside = 0;
    size_t whole = (n - k) / 6;
    for (size_t g = 0; g < whole; g++) inside += in_circle(p + k + 6 * g);
    st->inside += inside;
    st->groups += whole;
    for (k += 6 * whole; k < n; k++) st->part[st->npart++] = p[k];
    return 0;
}
