/* /dev/fuse I/O for the mount's libfuse session (libsrfuseio.so, built by scripts/install.sh).
 *
 * libfuse 3.14 (Debian 12's) builds its INIT reply only from the capabilities it knows, and it
 * does not know FUSE_HANDLE_KILLPRIV_V2 (kernel 5.11, protocol 7.33).  Without it the kernel
 * checks for privileges to drop itself, with requests of its own: a GETXATTR of
 * security.capability before every write(2) and a GETATTR before every chown(2), three of the
 * eleven requests a small file costs in a tar extract.  With it the kernel asks once per file and
 * leaves the clearing of set-user-ID and set-group-ID bits to the file system, telling it when:
 * a flag in WRITE, SETATTR (truncate) and OPEN (O_TRUNC) requests from callers without
 * CAP_FSETID.
 *
 * So the session's I/O goes through here (fuse_session_custom_io): read(2) and writev(2) as
 * libfuse would do them, plus
 *   - the first reply written after sr_fuseio_install, which is the INIT reply (the kernel sends
 *     nothing else before INIT is answered), gets FUSE_HANDLE_KILLPRIV_V2 added to its flags;
 *   - each request read records, for the thread that serves it (libfuse's worker threads read a
 *     request and serve it on the same thread), whether it carries the kernel's "clear set-id
 *     bits" flag: sr_fuseio_kill_suidgid() answers that for the request being served;
 *   - a GETXATTR of a name outside user.* is answered here (see answer_here);
 *   - which of libfuse's threads reads the next request is decided here (the baton, below).
 * A round trip answered here took ~21 us where the same answer from the Python handler took
 * ~28-39 us (os.getxattr in a loop, this machine).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

struct fuse;
struct fuse_session;

/* libfuse 3.14's struct fuse_custom_io and struct fuse_context (include/fuse_lowlevel.h, fuse.h). */
struct fuse_custom_io {
	ssize_t (*writev)(int fd, struct iovec *iov, int count, void *userdata);
	ssize_t (*read)(int fd, void *buf, size_t buf_len, void *userdata);
	ssize_t (*splice_receive)(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
				  unsigned int flags, void *userdata);
	ssize_t (*splice_send)(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
			       unsigned int flags, void *userdata);
};

struct fuse_context {
	struct fuse *fuse;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	void *private_data;
	mode_t umask;
};

extern struct fuse_context *fuse_get_context(void);
extern struct fuse_session *fuse_get_session(struct fuse *f);
extern int fuse_session_fd(struct fuse_session *se);
extern int fuse_session_custom_io(struct fuse_session *se, const struct fuse_custom_io *io, int fd);

static volatile int armed;   /* the next reply written is the INIT reply */
static volatile int patched; /* it went out with FUSE_HANDLE_KILLPRIV_V2 */
static __thread int kill_suidgid;

/* The request's opcode (0 if it is too short to have one). */
static uint32_t opcode_of(const char *req, size_t len)
{
	struct fuse_in_header h;

	if (len < sizeof h)
		return 0;
	memcpy(&h, req, sizeof h);
	return h.opcode;
}

/* Copies the request's fixed-size argument (what follows the header) into out; 0 if the request
 * is too short to hold it. */
static int arg_of(const char *req, size_t len, void *out, size_t size)
{
	if (len < sizeof(struct fuse_in_header) + size)
		return 0;
	memcpy(out, req + sizeof(struct fuse_in_header), size);
	return 1;
}

static int carries_kill(const char *req, size_t len)
{
	struct fuse_write_in w;
	struct fuse_setattr_in s;
	struct fuse_open_in o;

	switch (opcode_of(req, len)) {
	case FUSE_WRITE:
		return arg_of(req, len, &w, sizeof w) && (w.write_flags & FUSE_WRITE_KILL_SUIDGID);
	case FUSE_SETATTR:
		return arg_of(req, len, &s, sizeof s) && (s.valid & FATTR_KILL_SUIDGID);
	case FUSE_OPEN:
		return arg_of(req, len, &o, sizeof o) && (o.open_flags & FUSE_OPEN_KILL_SUIDGID);
	default:
		return 0;
	}
}

/* A GETXATTR of a name outside the user namespace: only user.* attributes are stored
 * (xattrs.py), so the answer is ENODATA whatever the file, as the Python handler would give it.
 * The kernel asks such names often (security.capability before a file's first write,
 * system.posix_acl_access for each entry ls -l shows): answered here, they cost no trip through
 * libfuse's path lookup and into Python. */
static int answer_here(int fd, const char *req, size_t len)
{
	struct fuse_in_header h;
	struct fuse_out_header out;
	const char *name = req + sizeof h + sizeof(struct fuse_getxattr_in);

	if (len < sizeof h + sizeof(struct fuse_getxattr_in) + 1)
		return 0;
	memcpy(&h, req, sizeof h);
	if (h.opcode != FUSE_GETXATTR || h.len != len || req[len - 1] != '\0')
		return 0;
	if (strncmp(name, "user.", 5) == 0)
		return 0;
	out.len = sizeof out;
	out.error = -ENODATA;
	out.unique = h.unique;
	/* if the reply cannot be written (the mount is going away), libfuse's own read will see it */
	return write(fd, &out, sizeof out) == (ssize_t)sizeof out;
}

/* Which of libfuse's worker threads reads the next request.
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
 * back reads, as with libfuse alone, so those run in parallel as before.  A thread serving a small request that blocks
 * (say, on a request of its own to this mount) must not stall the mount: one waiting thread
 * watches, and if no request was taken for WATCH_NS while the baton is held, it reads
 * alongside.  The watcher sleeps when the mount has been idle for a whole period and is woken
 * by the next small request, so an idle mount has no timers running. */
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

	switch (opcode_of(req, len)) {
	case 0:
	case FUSE_FSYNC:
	case FUSE_FSYNCDIR:
	case FUSE_FALLOCATE:
	case FUSE_COPY_FILE_RANGE:
		return 1;
	case FUSE_READ:
		return !arg_of(req, len, &r, sizeof r) || r.size >= BIG_IO;
	case FUSE_WRITE:
		return !arg_of(req, len, &w, sizeof w) || w.size >= BIG_IO;
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

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n;
	int err, gone;

	(void)userdata;
	pthread_mutex_lock(&mu);
	pthread_cleanup_push(unlock_mu, NULL);
	let_go();
	gone = wait_for_baton();
	if (!gone)
		readers++;
	pthread_cleanup_pop(1);
	if (gone) {
		errno = gone;
		return -1;
	}

	do
		n = read(fd, buf, len);
	while (n > 0 && answer_here(fd, buf, (size_t)n));
	err = errno;

	pthread_mutex_lock(&mu);
	readers--;
	if (n > 0) {
		taken++;
		if (hands_on(buf, (size_t)n)) {
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

	kill_suidgid = n > 0 && carries_kill(buf, (size_t)n);
	errno = err;
	return n;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	if (armed && count == 2 && iov[0].iov_len == sizeof(struct fuse_out_header) &&
	    iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t)) {
		struct fuse_out_header *h = iov[0].iov_base;
		struct fuse_init_out *o = iov[1].iov_base;
		armed = 0;
		/* libfuse 3.14 answers with protocol 7.31; the kernel reads the flag whatever the
		 * minor (sr_fuseio_install is only called when the kernel offered it) */
		if (h->error == 0 && o->major == FUSE_KERNEL_VERSION) {
			o->flags |= FUSE_HANDLE_KILLPRIV_V2;
			patched = 1;
		}
	}
	return writev(fd, iov, count);
}

static const struct fuse_custom_io io = {
	.writev = io_writev,
	.read = io_read,
};

/* Called from the file system's init callback: on libfuse's thread answering INIT, before the
 * reply is written.  Returns 0 or a negative errno from libfuse. */
int sr_fuseio_install(void)
{
	struct fuse_context *c = fuse_get_context();
	struct fuse_session *se;

	if (c == NULL || c->fuse == NULL)
		return -22;
	se = fuse_get_session(c->fuse);
	pthread_once(&once, init_once);
	pthread_mutex_lock(&mu); /* a fresh session (a process may mount more than once) */
	readers = holders = watching = sleepers = dead = bulk = 0;
	taken = 0;
	pthread_mutex_unlock(&mu);
	armed = 1;
	return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

int sr_fuseio_patched(void)
{
	return patched;
}

int sr_fuseio_kill_suidgid(void)
{
	return kill_suidgid;
}
