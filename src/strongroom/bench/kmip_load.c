/* KMIP load generator: CONNS threads, each one TLS connection with a client certificate, send
 * one pre-encoded request message over and over for SECONDS and read each whole response (its
 * 8-byte TTLV header gives the length).  Prints JSON: requests, errors (responses whose first
 * batch item is not Success, or I/O failures), rate, p50/p90/p99 in ms.  C, so that the
 * generator costs the same for every server it drives and little beside them.
 *
 *   kmip_load HOST PORT CERT KEY CA CONNS SECONDS REQUEST_FILE
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES 2000000

static const char *host, *port;
static SSL_CTX *ctx;
static unsigned char *request;
static long request_len;
static double seconds;
static double *samples;
static long nsamples, errors;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int read_exactly(SSL *ssl, unsigned char *buf, long n) {
    long got = 0;
    while (got < n) {
        int r = SSL_read(ssl, buf + got, (int)(n - got));
        if (r <= 0) return -1;
        got += r;
    }
    return 0;
}

/* 1 if the response's first Result Status (tag 42007F, enumeration) is Success (0) */
static int success(const unsigned char *buf, long n) {
    for (long i = 0; i + 12 <= n; i++)
        if (buf[i] == 0x42 && buf[i + 1] == 0x00 && buf[i + 2] == 0x7F && buf[i + 3] == 0x05)
            return buf[i + 8] == 0 && buf[i + 9] == 0 && buf[i + 10] == 0 && buf[i + 11] == 0;
    return 0;
}

static SSL *connect_tls(void) {
    struct addrinfo hints = {0}, *res;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0) return NULL;
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        freeaddrinfo(res);
        if (fd >= 0) close(fd);
        return NULL;
    }
    freeaddrinfo(res);
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) != 1) {
        SSL_free(ssl);
        close(fd);
        return NULL;
    }
    return ssl;
}

static void *worker(void *arg) {
    (void)arg;
    double *mine = malloc(sizeof(double) * (MAX_SAMPLES / 16));
    long count = 0, bad = 0, cap = MAX_SAMPLES / 16;
    unsigned char *buf = malloc(1 << 21);
    SSL *ssl = connect_tls();
    double end = now() + seconds;
    while (ssl != NULL && now() < end) {
        double t0 = now();
        if (SSL_write(ssl, request, (int)request_len) != request_len || read_exactly(ssl, buf, 8) != 0) {
            bad++;
            break;
        }
        long len = ((long)buf[4] << 24) | ((long)buf[5] << 16) | ((long)buf[6] << 8) | buf[7];
        if (len > (1 << 21) - 8 || read_exactly(ssl, buf + 8, len) != 0) {
            bad++;
            break;
        }
        if (!success(buf, len + 8)) bad++;
        if (count < cap) mine[count++] = (now() - t0) * 1000.0;
    }
    if (ssl == NULL) bad++;
    pthread_mutex_lock(&lock);
    for (long i = 0; i < count && nsamples < MAX_SAMPLES; i++) samples[nsamples++] = mine[i];
    errors += bad;
    pthread_mutex_unlock(&lock);
    if (ssl != NULL) {
        int fd = SSL_get_fd(ssl);
        SSL_shutdown(ssl);
        SSL_free(ssl);
        close(fd);
    }
    free(mine);
    free(buf);
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: kmip_load HOST PORT CERT KEY CA CONNS SECONDS REQUEST_FILE\n");
        return 2;
    }
    host = argv[1];
    port = argv[2];
    int conns = atoi(argv[6]);
    seconds = atof(argv[7]);
    FILE *f = fopen(argv[8], "rb");
    if (f == NULL) return 2;
    fseek(f, 0, SEEK_END);
    request_len = ftell(f);
    rewind(f);
    request = malloc(request_len);
    if (fread(request, 1, request_len, f) != (size_t)request_len) return 2;
    fclose(f);
    ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_file(ctx, argv[3], SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, argv[4], SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_load_verify_locations(ctx, argv[5], NULL) != 1) {
        ERR_print_errors_fp(stderr);
        return 2;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    samples = malloc(sizeof(double) * MAX_SAMPLES);
    pthread_t *threads = calloc(conns, sizeof(pthread_t));
    double t0 = now();
    for (int i = 0; i < conns; i++) pthread_create(&threads[i], NULL, worker, NULL);
    for (int i = 0; i < conns; i++) pthread_join(threads[i], NULL);
    double took = now() - t0;
    qsort(samples, nsamples, sizeof(double), by_value);
    double p50 = nsamples ? samples[nsamples / 2] : 0, p90 = nsamples ? samples[nsamples * 9 / 10] : 0;
    double p99 = nsamples ? samples[nsamples * 99 / 100] : 0;
    printf("{\"requests\": %ld, \"errors\": %ld, \"seconds\": %.3f, \"rate\": %.1f, \"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f}\n",
           nsamples, errors, took, nsamples / took, p50, p90, p99);
    return 0;
}
