/* The reader baton: which of libfuse's worker threads reads the next request.
 *
 * libfuse's threads all wait in read(2) on /dev/fuse, and the kernel hands each request to the
 * thread that has waited longest: a different, cold thread for every request of a sequential
 * stream, which then has to take Python's GIL from the thread that served the one before.  On
 * the project's machine that hand-over cost more than the request: a tar extract ran 28 % faster
 * with libfuse in single-threaded mode.  But one thread would also serialise the big reads and
 * writes, whose crypto runs without the GIL on several cores.
 *
 * So reading is a baton.  Only one thread reads at a time; the others wait here, out of
 * read(2).  A thread that takes a small request keeps the baton while it serves it and, coming
 * back, reads the next one itself: a stream of small requests stays on one hot thread.  A
 * request that may take long (a big READ or WRITE, an fsync; see hands_on) passes the baton on
 * at once and wakes one more reader, and until the next small request every thread that comes
 * back reads, as with libfuse alone, so those run in parallel as before.  A thread serving a
 * small request that blocks (say, on a request of its own to this mount) must not stall the
 * mount: one waiting thread watches, and if no request was taken for WATCH_NS while the baton is
 * held, it reads alongside.  The watcher sleeps when the mount has been idle for a whole period and is woken
 * by the next small request, so an idle mount has no timers running. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "fuseio.h"

#define WATCH_NS 1000000L
#define BIG_IO (256u << 10) /* a READ or WRITE this big passes the baton on */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watch_cv; /* the watcher waits here (timed, on CLOCK_MONOTONIC) */
static pthread_cond_t sleep_cv = PTHREAD_COND_INITIALIZER; /* everyone else waits here */
static int readers;        /* threads in read(2) */
static int holders;        /* threads serving a small request, baton in hand */
static int watching;       /* a thread is timing the holders */
static int sleepers;       /* threads on sleep_cv */
static int dead;           /* /dev/fuse is gone (ENODEV): everyone returns it */
static int bulk;           /* long requests are flowing: every idle thread reads */
static unsigned long taken; /* requests read so far */
static pthread_key_t holding; /* non-NULL while this thread holds the baton */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int hands_on(const char *req, size_t len)
{
	struct fuse_read_in r;
	struct fuse_write_in w;

	switch (sr_opcode_of(req, len)) {
	case 0:
	case FUSE_FSYNC:
	case FUSE_FSYNCDIR:
	case FUSE_FALLOCATE:
	case FUSE_COPY_FILE_RANGE:
		return 1;
	case FUSE_READ:
		return !sr_arg_of(req, len, &r, sizeof r) || r.size >= BIG_IO;
	case FUSE_WRITE:
		return !sr_arg_of(req, len, &w, sizeof w) || w.size >= BIG_IO;
	default:
		return 0;
	}
}

/* with mu held */
static void wake_a_reader(void)
{
	if (watching)
		pthread_cond_signal(&watch_cv);
	else if (sleepers)
		pthread_cond_signal(&sleep_cv);
}

/* with mu held */
static void let_go(void)
{
	if (pthread_getspecific(holding) != NULL) {
		pthread_setspecific(holding, NULL);
		holders--;
	}
}

/* A thread that leaves libfuse's pool holding the baton gives it back. */
static void on_thread_exit(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&mu);
	holders--;
	wake_a_reader();
	pthread_mutex_unlock(&mu);
}

static void init_once(void)
{
	pthread_condattr_t attr;

	pthread_key_create(&holding, on_thread_exit);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&watch_cv, &attr);
	pthread_condattr_destroy(&attr);
}

static void unlock_mu(void *unused)
{
	(void)unused;
	pthread_mutex_unlock(&mu);
}

static int free_to_read(void)
{
	return bulk || (readers == 0 && holders == 0);
}

/* Waits (with mu held) until this thread may read; returns 0, or ENODEV when the mount is gone.
 * A cancellation point (libfuse cancels its workers at exit): the caller's cleanup handler
 * releases mu. */
static int wait_for_baton(void)
{
	while (!dead && !free_to_read()) {
		if (!watching && readers == 0) { /* holders are serving: time them */
			unsigned long seen = taken;
			int steal = 0;
			struct timespec deadline;

			watching = 1;
			while (!dead && !free_to_read()) {
				clock_gettime(CLOCK_MONOTONIC, &deadline);
				deadline.tv_nsec += WATCH_NS;
				if (deadline.tv_nsec >= 1000000000L) {
					deadline.tv_sec++;
					deadline.tv_nsec -= 1000000000L;
				}
				if (pthread_cond_timedwait(&watch_cv, &mu, &deadline) != ETIMEDOUT)
					continue;
				if (taken != seen) {
					seen = taken;
					continue;
				}
				steal = readers == 0; /* held for a whole period: read alongside */
				break;                /* (or idle for a whole period: sleep) */
			}
			watching = 0;
			if (steal)
				return 0;
			continue;
		}
		sleepers++;
		pthread_cond_wait(&sleep_cv, &mu);
		sleepers--;
	}
	return dead;
}


void sr_baton_reset(void)
{
	pthread_once(&once, init_once);
	pthread_mutex_lock(&mu); /* a fresh session (a process may mount more than once) */
	readers = holders = watching = sleepers = dead = bulk = 0;
	taken = 0;
	pthread_mutex_unlock(&mu);
}

int sr_baton_take(void)
{
	int gone;

	pthread_mutex_lock(&mu);
	pthread_cleanup_push(unlock_mu, NULL);
	let_go();
	gone = wait_for_baton();
	if (!gone)
		readers++;
	pthread_cleanup_pop(1);
	return gone;
}

void sr_baton_after_read(const char *req, ssize_t n, int err)
{
	pthread_mutex_lock(&mu);
	readers--;
	if (n > 0) {
		taken++;
		if (hands_on(req, (size_t)n)) {
			bulk = 1;
			wake_a_reader(); /* one more reader per long request: a burst fans out */
		} else {
			bulk = 0;
			pthread_setspecific(holding, (void *)1);
			holders++;
			if (!watching && sleepers)
				pthread_cond_signal(&sleep_cv); /* someone to watch this one */
		}
	} else if (n < 0 && err == ENODEV) {
		dead = ENODEV;
		pthread_cond_broadcast(&watch_cv);
		pthread_cond_broadcast(&sleep_cv);
	} else {
		wake_a_reader(); /* EINTR and the like: libfuse reads again, maybe on another thread */
	}
	pthread_mutex_unlock(&mu);
}

