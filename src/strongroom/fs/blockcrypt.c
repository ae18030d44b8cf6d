/* The content-block loop of docs/FORMAT.md §5, in C around the OS's OpenSSL (libcrypto's EVP
 * AES-256-GCM): no primitive is written here, only the loop that Python would otherwise run once
 * per 4 KiB block.  Through pyca/cryptography each block costs a context copy and an argument
 * parse (~2 µs of the ~3.6 µs a block takes); here the key schedule is done once per call and
 * each block only sets its nonce.  ctypes releases the GIL for the whole call, so threads scale.
 *
 * Sealed block k (k = first, first+1, ...): nonce(12) || AES-256-GCM(key, nonce, block,
 * AAD = file_id(16) || k as 8 bytes big-endian) || tag(16).  Nonces come from the caller
 * (getrandom), 12 bytes per block.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define SR_BLOCK 4096
#define SR_NONCE 12
#define SR_TAG 16

static void put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

/* Seals with a context already keyed; returns the bytes written, or -1 if OpenSSL failed. */
static long seal_keyed(EVP_CIPHER_CTX *ctx, const unsigned char *file_id, uint64_t first,
                       const unsigned char *plain, size_t len, const unsigned char *nonces,
                       unsigned char *out)
{
    unsigned char aad[24];
    long at = 0;
    int n;
    memcpy(aad, file_id, 16);
    for (size_t off = 0, k = 0; off < len; off += SR_BLOCK, k++) {
        size_t m = len - off < SR_BLOCK ? len - off : SR_BLOCK;
        const unsigned char *nonce = nonces + k * SR_NONCE;
        unsigned char *dst = out + at;
        put_be64(aad + 16, first + k);
        memcpy(dst, nonce, SR_NONCE);
        if (EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1 ||
            EVP_EncryptUpdate(ctx, NULL, &n, aad, sizeof aad) != 1 ||
            EVP_EncryptUpdate(ctx, dst + SR_NONCE, &n, plain + off, (int)m) != 1 ||
            EVP_EncryptFinal_ex(ctx, dst + SR_NONCE + n, &n) != 1 ||
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, SR_TAG, dst + SR_NONCE + m) != 1)
            return -1;
        at += (long)(SR_NONCE + m + SR_TAG);
    }
    return at;
}

/* OpenSSL 3 looks the algorithm up in its provider tables on every init given EVP_aes_256_gcm()
 * (an implicit fetch, about a microsecond of every call); fetched once here instead.  Falls back
 * to the implicit form on OpenSSL 1.1 and if the fetch fails. */
static pthread_once_t gcm_once = PTHREAD_ONCE_INIT;
static const EVP_CIPHER *gcm_cipher;

static void fetch_gcm(void)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    gcm_cipher = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
#endif
    if (gcm_cipher == NULL)
        gcm_cipher = EVP_aes_256_gcm();
}

static const EVP_CIPHER *gcm(void)
{
    pthread_once(&gcm_once, fetch_gcm);
    return gcm_cipher;
}

static EVP_CIPHER_CTX *keyed(const unsigned char *key)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (ctx != NULL && EVP_EncryptInit_ex(ctx, gcm(), NULL, key, NULL) != 1) {
        EVP_CIPHER_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* Every entry point checks the sizes it is given before touching a buffer (the Python callers
 * check them too): a wrong size answers SR_EBADLEN, never a write past an end. */
#define SR_EBADLEN (-3)
#define SR_KEY 32
#define SR_ID 16

/* Bumped whenever an entry point's signature changes: a loader refuses another version's build. */
int sr_abi_version(void) { return 2; }

static size_t blocks_of(size_t len) { return len / SR_BLOCK + (len % SR_BLOCK != 0); }

/* Seals len bytes of plain (every block full but the last) into out; returns the bytes written,
 * -1 if OpenSSL failed, SR_EBADLEN if a size is wrong. */
long sr_seal_blocks(const unsigned char *key, size_t key_len, const unsigned char *file_id, size_t id_len,
                    uint64_t first, const unsigned char *plain, size_t len, const unsigned char *nonces,
                    size_t nonces_len, unsigned char *out, size_t out_len)
{
    size_t blocks = blocks_of(len);
    if (key_len != SR_KEY || id_len != SR_ID || nonces_len / SR_NONCE < blocks ||
        out_len < len || out_len - len < blocks * (SR_NONCE + SR_TAG))
        return SR_EBADLEN;
    EVP_CIPHER_CTX *ctx = keyed(key);
    if (ctx == NULL)
        return -1;
    long at = seal_keyed(ctx, file_id, first, plain, len, nonces, out);
    EVP_CIPHER_CTX_free(ctx);
    return at;
}

/* Whether n bytes at p are all zero. */
static int all_zero(const unsigned char *p, size_t n)
{
    return n > 0 && p[0] == 0 && memcmp(p, p + 1, n - 1) == 0;
}

/* Opens len bytes of consecutive sealed blocks into out; returns the plaintext bytes written.
 * A full-size block numbered below hole_limit whose stored bytes are all zero is a hole (format
 * version 3): it opens to 4096 zero bytes.  (No sealed block is all zero: its first byte, the
 * nonce's, is checked before anything else, so a sealed block costs one comparison.)
 * On a block that does not authenticate (or is too short to hold a nonce, a byte and a tag)
 * returns -2 with *bad set to its number; -1 if OpenSSL failed otherwise; SR_EBADLEN if out
 * cannot hold what the blocks may open to.  The caller must not use out on failure: blocks
 * before the bad one were written. */
long sr_open_blocks(const unsigned char *key, size_t key_len, const unsigned char *file_id, size_t id_len,
                    uint64_t first, const unsigned char *sealed, size_t len, unsigned char *out,
                    size_t out_len, uint64_t *bad, uint64_t hole_limit)
{
    const size_t cblock = SR_NONCE + SR_BLOCK + SR_TAG;
    size_t whole = len / cblock, rest = len % cblock;
    /* the most plaintext these blocks can hold: whole blocks, and a tail past its overhead */
    size_t most = whole * SR_BLOCK + (rest > SR_NONCE + SR_TAG ? rest - SR_NONCE - SR_TAG : 0);
    if (key_len != SR_KEY || id_len != SR_ID || out_len < most)
        return SR_EBADLEN;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    unsigned char aad[24];
    long at = 0;
    int n;
    if (ctx == NULL || EVP_DecryptInit_ex(ctx, gcm(), NULL, key, NULL) != 1) {
        EVP_CIPHER_CTX_free(ctx);
        return -1;
    }
    memcpy(aad, file_id, 16);
    for (size_t off = 0, k = 0; off < len; off += cblock, k++) {
        size_t c = len - off < cblock ? len - off : cblock;
        const unsigned char *src = sealed + off;
        if (c <= SR_NONCE + SR_TAG) {
            *bad = first + k;
            EVP_CIPHER_CTX_free(ctx);
            return -2;
        }
        size_t m = c - SR_NONCE - SR_TAG;
        if (first + k < hole_limit && c == cblock && all_zero(src, cblock)) {
            memset(out + at, 0, SR_BLOCK);
            at += SR_BLOCK;
            continue;
        }
        put_be64(aad + 16, first + k);
        if (EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, src) != 1 ||
            EVP_DecryptUpdate(ctx, NULL, &n, aad, sizeof aad) != 1 ||
            EVP_DecryptUpdate(ctx, out + at, &n, src + SR_NONCE, (int)m) != 1 ||
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, SR_TAG, (void *)(src + SR_NONCE + m)) != 1 ||
            EVP_DecryptFinal_ex(ctx, out + at + n, &n) != 1) {
            *bad = first + k;
            EVP_CIPHER_CTX_free(ctx);
            return -2;
        }
        at += (long)m;
    }
    EVP_CIPHER_CTX_free(ctx);
    return at;
}

/* Reads up to len plaintext bytes of file descriptor fd from offset and seals them into out as
 * blocks first, first+1, ...: sr_seal_blocks over what a pread of the same range returns, done
 * SR_CHUNK bytes at a time through scratch (SR_CHUNK bytes) so each chunk is still in this core's
 * cache when it is sealed.  Stops at end of file.  Returns the sealed bytes written and sets
 * *nread to the plaintext bytes read; -1 if OpenSSL failed, -2 if the read failed (errno set),
 * SR_EBADLEN if len is not a multiple of SR_BLOCK or a buffer is too small for it. */
#define SR_CHUNK (16 * SR_BLOCK)

long sr_pread_seal(int fd, int64_t offset, size_t len, const unsigned char *key, size_t key_len,
                   const unsigned char *file_id, size_t id_len, uint64_t first, const unsigned char *nonces,
                   size_t nonces_len, unsigned char *scratch, size_t scratch_len, unsigned char *out,
                   size_t out_len, uint64_t *nread)
{
    size_t blocks = len / SR_BLOCK;
    *nread = 0;
    if (key_len != SR_KEY || id_len != SR_ID || len % SR_BLOCK || offset < 0 || nonces_len / SR_NONCE < blocks ||
        scratch_len < SR_CHUNK || out_len < len || out_len - len < blocks * (SR_NONCE + SR_TAG))
        return SR_EBADLEN;
    EVP_CIPHER_CTX *ctx = keyed(key);
    long at = 0;
    size_t done = 0;
    if (ctx == NULL)
        return -1;
    while (done < len) {
        size_t want = len - done < SR_CHUNK ? len - done : SR_CHUNK, have = 0;
        while (have < want) {
            ssize_t got = pread(fd, scratch + have, want - have, (off_t)(offset + done + have));
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0) {
                int saved = errno;
                EVP_CIPHER_CTX_free(ctx);
                errno = saved;
                return -2;
            }
            if (got == 0)
                break;
            have += (size_t)got;
        }
        if (have == 0)
            break;
        long sealed = seal_keyed(ctx, file_id, first + done / SR_BLOCK, scratch, have,
                                 nonces + done / SR_BLOCK * SR_NONCE, out + at);
        if (sealed < 0) {
            at = -1;
            break;
        }
        at += sealed;
        done += have;
        *nread = done;
        if (have < want)
            break; /* end of file */
    }
    EVP_CIPHER_CTX_free(ctx);
    return at;
}
