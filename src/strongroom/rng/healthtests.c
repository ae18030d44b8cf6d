/* SP 800-90B §4.4 continuous health tests over a stream of byte samples, for strongroom.rng.health
 * (which derives the cutoffs and documents the rules; its numpy version is the reference). */
#include <stddef.h>
#include <stdint.h>

struct sr_health {
    uint32_t rct_limit, apt_limit, apt_window;
    uint32_t run;       /* length of the current run of equal samples (0 before the first) */
    uint32_t last;      /* the previous sample */
    uint32_t apt_seen;  /* samples of the current window so far (0: no window open) */
    uint32_t apt_first, apt_count;
    uint64_t rct_failures, apt_failures;
};

/* Returns 0, or -3 for a state no caller may pass (a window of 0, or past its end): nothing is
 * touched, where the loop below would otherwise never end. */
int sr_health_update(struct sr_health *st, const uint8_t *p, size_t n) {
    if (st->apt_window == 0 || st->apt_seen >= st->apt_window) return -3;
    uint32_t run = st->run, last = st->last;
    uint64_t rct = 0;
    for (size_t i = 0; i < n; i++) {
        run = (p[i] == last && run) ? run + 1 : 1;
        last = p[i];
        rct += run == st->rct_limit; /* once per run that reaches the cutoff */
    }
    st->run = run;
    st->last = last;
    st->rct_failures += rct;

    size_t i = 0;
    while (i < n) {
        if (st->apt_seen == 0) {
            st->apt_first = p[i];
            st->apt_count = 0;
        }
        size_t take = st->apt_window - st->apt_seen;
        if (take > n - i) take = n - i;
        uint32_t c = 0;
        const uint8_t first = (uint8_t)st->apt_first;
        for (size_t j = 0; j < take; j++) c += p[i + j] == first;
        st->apt_count += c;
        st->apt_seen += (uint32_t)take;
        i += take;
        if (st->apt_seen == st->apt_window) {
            st->apt_failures += st->apt_count >= st->apt_limit;
            st->apt_seen = 0;
        }
    }
    return 0;
}
