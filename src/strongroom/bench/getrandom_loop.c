/* The floor for key generation: getrandom(2) straight from C, no interpreter.
 * Usage: getrandom_loop KEYS MIB  ->  prints "ns_per_key MBps" */
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    long keys = argc > 1 ? atol(argv[1]) : 1000000, mib = argc > 2 ? atol(argv[2]) : 64;
    unsigned char key[32];
    static unsigned char buf[1 << 20];
    double t0 = now();
    for (long i = 0; i < keys; i++)
        if (getrandom(key, sizeof key, 0) != sizeof key) return 1;
    double t1 = now();
    for (long i = 0; i < mib; i++)
        for (size_t got = 0; got < sizeof buf;) {
            ssize_t r = getrandom(buf + got, sizeof buf - got, 0);
            if (r < 0) return 1;
            got += (size_t)r;
        }
    double t2 = now();
    printf("%.1f %.1f\n", (t1 - t0) * 1e9 / keys, mib * 1.048576 / (t2 - t1));
    return 0;
}
