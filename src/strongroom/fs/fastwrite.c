/* The write fast path: a WRITE that rewrites whole blocks of a file in place, and an FSYNC, answered
 * on the thread that read them (fuseio.c), without libfuse's path lookup or Python.
 *
 * A database rewrites its pages in place, 8 KiB at a time, and waits for each before its commit
 * returns: there the ~40 us a request spends in libfuse's path lookup, ctypes and Python were
 * most of the request.  This path takes only what needs no decision beyond arithmetic: the
 * handle was registered by the daemon (fastwrite.py: a file opened without O_APPEND on a
 * writable mount), the file's header has been read (its key published here), the write starts
 * and ends on block boundaries inside the file's current plaintext size, the lower file has one
 * name and no set-id bit, and no block in the range is a hole.  Anything else, and every error
 * before a byte is written, goes on to libfuse as if this file did not exist; fileio.py serves
 * it.  So this file knows FORMAT.md §5's sizes and nothing of holes, growth, headers or crash
 * ordering: a whole-block rewrite in place is one pwrite, as fileio.py does it.  An FSYNC of a
 * registered handle is the fsync(2) or fdatasync(2) of its lower descriptor, all fileio.py does.
 *
 * Each open lower file has one lock (struct sr_file), which the daemon's Python also takes for
 * every operation on the file's content (fastwrite.NativeFile), so a block is never read while
 * it is rewritten here.  The sealing is libsrblocks.so's sr_seal_blocks, handed over at enable;
 * nonces come from getrandom(2). */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "fuseio.h"

#define BLOCK 4096
#define CBLOCK (BLOCK + 12 + 16) /* FORMAT.md §5: nonce, ciphertext, tag */
#define HEADER 84
#define FAST_MAX (128u << 10) /* larger writes pass the reader baton on (baton.c): not here */
#define MAX_BLOCKS (1ull << 32) /* a file key's block numbers (FORMAT.md §5) */
#define BUCKETS 256

typedef long (*seal_fn)(const unsigned char *key, size_t key_len, const unsigned char *file_id, size_t id_len,
			uint64_t first, const unsigned char *plain, size_t len, const unsigned char *nonces,
			size_t nonces_len, unsigned char *out, size_t out_len);

struct sr_file {
	pthread_mutex_t lock; /* recursive: the file's content lock, Python's too */
	int keyed;
	int holes; /* the volume's format has holes (version 3 on) */
	unsigned char key[32], id[16];
	int written; /* rewritten here since the daemon last asked */
};

struct node {
	uint64_t fh;
	int fd;
	struct sr_file *file;
	int refs; /* fast writes using it now */
	struct node *next;
};

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t table_cv = PTHREAD_COND_INITIALIZER;
static struct node *buckets[BUCKETS];
static seal_fn sealer;
static __thread unsigned char *sealed; /* FAST_MAX / BLOCK * CBLOCK bytes, per libfuse thread */

void *sr_file_new(int holes)
{
	struct sr_file *f = calloc(1, sizeof *f);
	pthread_mutexattr_t a;

	if (f == NULL)
		return NULL;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&f->lock, &a);
	pthread_mutexattr_destroy(&a);
	f->holes = holes;
	return f;
}

/* Only once no handle of it is registered (the daemon frees it with its last reference). */
void sr_file_free(void *p)
{
	struct sr_file *f = p;

	explicit_bzero(f->key, sizeof f->key);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

void sr_file_lock(void *p) { pthread_mutex_lock(&((struct sr_file *)p)->lock); }
int sr_file_trylock(void *p) { return pthread_mutex_trylock(&((struct sr_file *)p)->lock) == 0; }
void sr_file_unlock(void *p) { pthread_mutex_unlock(&((struct sr_file *)p)->lock); }

/* The file's key and id from its header, or (key NULL) none known; with the file's lock held. */
void sr_file_key(void *p, const unsigned char *key, const unsigned char *id)
{
	struct sr_file *f = p;

	f->keyed = key != NULL;
	if (key != NULL) {
		memcpy(f->key, key, sizeof f->key);
		memcpy(f->id, id, sizeof f->id);
	} else {
		explicit_bzero(f->key, sizeof f->key);
	}
}

int sr_file_take_written(void *p) { return __atomic_exchange_n(&((struct sr_file *)p)->written, 0, __ATOMIC_ACQ_REL); }

int sr_fast_add(uint64_t fh, int fd, void *file)
{
	struct node *n = calloc(1, sizeof *n);

	if (n == NULL)
		return -ENOMEM;
	n->fh = fh;
	n->fd = fd;
	n->file = file;
	pthread_mutex_lock(&table_mu);
	n->next = buckets[fh % BUCKETS];
	buckets[fh % BUCKETS] = n;
	pthread_mutex_unlock(&table_mu);
	return 0;
}

/* Unregisters fh and returns once no fast write uses its descriptor (the caller closes it next). */
void sr_fast_remove(uint64_t fh)
{
	struct node **at, *n = NULL;

	pthread_mutex_lock(&table_mu);
	for (at = &buckets[fh % BUCKETS]; *at != NULL; at = &(*at)->next) {
		if ((*at)->fh == fh) {
			n = *at;
			*at = n->next;
			break;
		}
	}
	while (n != NULL && n->refs > 0)
		pthread_cond_wait(&table_cv, &table_mu);
	pthread_mutex_unlock(&table_mu);
	free(n);
}

/* seal: libsrblocks.so's sr_seal_blocks, or NULL to send every WRITE on to libfuse. */
void sr_fast_enable(void *seal)
{
	sealer = (seal_fn)seal;
}

static struct node *take(uint64_t fh)
{
	struct node *n;

	pthread_mutex_lock(&table_mu);
	for (n = buckets[fh % BUCKETS]; n != NULL && n->fh != fh; n = n->next)
		;
	if (n != NULL)
		n->refs++;
	pthread_mutex_unlock(&table_mu);
	return n;
}

static void put(struct node *n)
{
	pthread_mutex_lock(&table_mu);
	if (--n->refs == 0)
		pthread_cond_broadcast(&table_cv);
	pthread_mutex_unlock(&table_mu);
}

/* The plaintext size of a lower file of size s, or -1 where FORMAT.md §5 says damaged (or empty:
 * neither is rewritten here). */
static int64_t plain_size(int64_t s)
{
	int64_t q, r;

	if (s < HEADER + 12 + 16 + 1)
		return -1;
	q = (s - HEADER) / CBLOCK;
	r = (s - HEADER) % CBLOCK;
	if (r > 0 && r <= 12 + 16)
		return -1;
	return q * BLOCK + (r > 0 ? r - 12 - 16 : 0);
}

static int fill_random(unsigned char *p, size_t n)
{
	while (n > 0) {
		ssize_t got = getrandom(p, n, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return -1;
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

/* 0: not for this path (nothing written); otherwise the reply's error (0 or a negative errno). */
static int rewrite(struct node *n, const struct fuse_write_in *w, const unsigned char *data)
{
	struct sr_file *f = n->file;
	struct stat st;
	unsigned char nonces[FAST_MAX / BLOCK * 12];
	uint64_t first = w->offset / BLOCK, blocks = w->size / BLOCK;
	off_t at = HEADER + (off_t)first * CBLOCK, end = at + (off_t)blocks * CBLOCK;
	int64_t size;

	if (!f->keyed || fstat(n->fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
	    (st.st_mode & (S_ISUID | S_ISGID)))
		return 0;
	size = plain_size(st.st_size);
	if (size < 0 || w->offset + w->size > (uint64_t)size || first + blocks > MAX_BLOCKS)
		return 0;
	if (f->holes) { /* a hole inside the range needs room reserved first: fileio.py's job */
		off_t hole = lseek(n->fd, at, SEEK_HOLE);
		if (hole < end)
			return 0;
	}
	if (sealed == NULL && (sealed = malloc(FAST_MAX / BLOCK * CBLOCK)) == NULL)
		return 0;
	if (fill_random(nonces, blocks * 12) != 0)
		return 0;
	long len = sealer(f->key, sizeof f->key, f->id, sizeof f->id, first, data, w->size, nonces, blocks * 12,
			  sealed, FAST_MAX / BLOCK * CBLOCK);
	if (len != (long)(blocks * CBLOCK))
		return 0;
	for (long done = 0; done < len;) {
		ssize_t put = pwrite(n->fd, sealed + done, (size_t)(len - done), at + done);
		if (put < 0 && errno == EINTR)
			continue;
		if (put <= 0)
			return put < 0 ? -errno : -EIO;
		done += put;
	}
	__atomic_store_n(&f->written, 1, __ATOMIC_RELEASE);
	return 1;
}

/* Whether req is a whole request of this opcode (the path on); its header and fixed argument. */
static int parse(const char *req, size_t len, uint32_t opcode, struct fuse_in_header *h, void *arg, size_t size)
{
	if (sealer == NULL || !sr_arg_of(req, len, arg, size))
		return 0;
	memcpy(h, req, sizeof *h);
	return h->opcode == opcode && h->len == len;
}

/* Always 1, the request answered: if the reply cannot be written, the mount is going away and
 * libfuse's next read will see it. */
static int reply(int fd, const void *out, size_t size)
{
	if (write(fd, out, size) != (ssize_t)size)
		return 1;
	return 1;
}

int sr_fast_write(int fd, const char *req, size_t len)
{
	struct fuse_in_header h;
	struct fuse_write_in w;
	struct node *n;
	int r;

	if (!parse(req, len, FUSE_WRITE, &h, &w, sizeof w))
		return 0;
	if (w.size == 0 || w.size > FAST_MAX || w.size % BLOCK || w.offset % BLOCK || len - sizeof h - sizeof w != w.size)
		return 0;
	n = take(w.fh);
	if (n == NULL)
		return 0;
	pthread_mutex_lock(&n->file->lock);
	r = rewrite(n, &w, (const unsigned char *)req + sizeof h + sizeof w);
	pthread_mutex_unlock(&n->file->lock);
	put(n);
	if (r == 0)
		return 0;
	struct {
		struct fuse_out_header h;
		struct fuse_write_out w;
	} out = {{sizeof out, r < 0 ? r : 0, h.unique}, {r < 0 ? 0 : w.size, 0}};
	size_t size = r < 0 ? sizeof out.h : sizeof out;
	out.h.len = (uint32_t)size;
	return reply(fd, &out, size);
}

int sr_fast_fsync(int fd, const char *req, size_t len)
{
	struct fuse_in_header h;
	struct fuse_fsync_in in;
	struct fuse_out_header out;
	struct node *n;
	int r;

	if (!parse(req, len, FUSE_FSYNC, &h, &in, sizeof in))
		return 0;
	n = take(in.fh);
	if (n == NULL)
		return 0;
	r = in.fsync_flags & FUSE_FSYNC_FDATASYNC ? fdatasync(n->fd) : fsync(n->fd);
	out.error = r < 0 ? -errno : 0;
	put(n);
	out.len = sizeof out;
	out.unique = h.unique;
	return reply(fd, &out, sizeof out);
}
