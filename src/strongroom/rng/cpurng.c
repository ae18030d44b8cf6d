/* RDRAND and RDSEED for strongroom.rng.sources, with the retry rules of Intel's DRNG guide:
 * RDRAND may fail transiently (retry up to 10 times); RDSEED fails whenever its entropy
 * conditioner is drained, so it retries with a pause.  The instructions are compiled with
 * target attributes, so this builds on any x86-64 compiler and reports what the CPU lacks. */
#include <cpuid.h>
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

int sr_cpu_has_rdrand(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c >> 30) & 1;
}

int sr_cpu_has_rdseed(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b >> 18) & 1;
}

/* Fill buf with n bytes; returns how many were filled (fewer only if the instruction kept
 * failing).  A macro, so each loop inlines its instruction instead of calling through a pointer. */
#define FILL(NAME, TARGET, STEP, TRIES, BACKOFF)                                   \
    __attribute__((target(TARGET))) static inline int NAME##_word(unsigned long long *v) { \
        for (int t = 0; t < (TRIES); t++) {                                        \
            if (STEP(v)) return 1;                                                 \
            BACKOFF;                                                               \
        }                                                                          \
        return 0;                                                                  \
    }                                                                              \
    __attribute__((target(TARGET))) size_t NAME(uint8_t *buf, size_t n) {        \
        unsigned long long v;                                                      \
        size_t i = 0;                                                              \
        for (; i + 8 <= n; i += 8) {                                               \
            if (!NAME##_word(&v)) return i;                                        \
            memcpy(buf + i, &v, 8);                                                \
        }                                                                          \
        if (i < n) {                                                               \
            if (!NAME##_word(&v)) return i;                                        \
            memcpy(buf + i, &v, n - i);                                            \
        }                                                                          \
        return n;                                                                  \
    }

/* RDRAND: up to 10 tries (Intel: a failure 10 times in a row means a broken DRNG). */
FILL(sr_rdrand_fill, "rdrnd", _rdrand64_step, 10, (void)0)
/* RDSEED: underflows when drained faster than it reseeds; pause and retry for a while. */
FILL(sr_rdseed_fill, "rdseed", _rdseed64_step, 10000, _mm_pause())
