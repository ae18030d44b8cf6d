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

__attribute__((target("rdrnd"))) static int rdrand64(unsigned long long *v) {
    for (int tries = 0; tries < 10; tries++)
        if (_rdrand64_step(v)) return 1;
    return 0;
}

__attribute__((target("rdseed"))) static int rdseed64(unsigned long long *v) {
    for (int tries = 0; tries < 10000; tries++) {
        if (_rdseed64_step(v)) return 1;
        _mm_pause();
    }
    return 0;
}

/* Fill buf with n bytes; returns how many were filled (fewer only if the instruction kept failing). */
static size_t fill(int (*step)(unsigned long long *), uint8_t *buf, size_t n) {
    size_t i = 0;
    unsigned long long v;
    for (; i + 8 <= n; i += 8) {
        if (!step(&v)) return i;
        memcpy(buf + i, &v, 8);
    }
    if (i < n) {
        if (!step(&v)) return i;
        memcpy(buf + i, &v, n - i);
        i = n;
    }
    return i;
}

size_t sr_rdrand_fill(uint8_t *buf, size_t n) { return fill(rdrand64, buf, n); }
size_t sr_rdseed_fill(uint8_t *buf, size_t n) { return fill(rdseed64, buf, n); }
