/* /dev/fuse I/O for the mount's libfuse session (libsrfuseio.so with setid.c and baton.c).
 *
 * The session's I/O goes through here (fuse_session_custom_io): read(2) and writev(2) as libfuse
 * would do them, plus the parts switched on at install, each in its own file:
 *   - SR_SETID, the set-id shim (setid.c): the INIT reply asks for FUSE_HANDLE_KILLPRIV_V2 and
 *     each request's "clear set-id bits" flag is kept for the thread serving it;
 *   - SR_BATON, the reader baton (baton.c): which of libfuse's threads reads the next request.
 * and, with either, a GETXATTR of a name outside user.* is answered here (answer_here).
 *   - SR_DMMAP: the INIT reply carries FUSE_DIRECT_IO_ALLOW_MMAP (protocol 7.39, Linux 6.6),
 *     which libfuse 3.14 does not know, so files served without the page cache can still be
 *     mapped shared (the mount serves files with several names that way);
 * Always: a WRITE that rewrites whole blocks in place of a registered handle, and an FSYNC of
 * one, are answered here (fastwrite.c; nothing is registered until the daemon enables it).
 * Always: an invalidation sent by sr_fuseio_invalidate_attrs leaves the kernel's pages alone
 * (keep_pages), so a thread serving a request may send it without waiting on any page lock.
 *
 * The two I/O functions are exported (sr_fuseio_read, sr_fuseio_writev) so tests can drive them
 * on a socket pair, without a kernel mount; sr_fuseio_reset prepares them for that.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fuseio.h"

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
extern int fuse_invalidate_path(struct fuse *f, const char *path);

static struct fuse *mounted; /* the session's struct fuse, from install */
static __thread uint32_t serving; /* the opcode of the request this thread read last, and so serves */
static volatile int init_armed; /* SR_DMMAP: the next reply written is the INIT reply */
static volatile int dmmap; /* it went out with FUSE_DIRECT_IO_ALLOW_MMAP */
#define SR_DIRECT_IO_ALLOW_MMAP_2 (1u << 4) /* FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36), in flags2 */
static __thread int attrs_only; /* this thread is sending an attributes-only invalidation */

static int features; /* SR_SETID | SR_BATON, set before the session's first read */

uint32_t sr_opcode_of(const char *req, size_t len)
{
	struct fuse_in_header h;

	if (len < sizeof h)
		return 0;
	memcpy(&h, req, sizeof h);
	return h.opcode;
}

int sr_arg_of(const char *req, size_t len, void *out, size_t size)
{
	if (len < sizeof(struct fuse_in_header) + size)
		return 0;
	memcpy(out, req + sizeof(struct fuse_in_header), size);
	return 1;
}

/* A GETXATTR of a name outside the user namespace: only user.* attributes are stored
 * (xattrs.py), so the answer is ENODATA whatever the file, as the Python handler would give it.
 * The kernel asks such names often (security.capability before a file's first write,
 * system.posix_acl_access for each entry ls -l shows): answered here, they cost no trip through
 * libfuse's path lookup and into Python.  A round trip answered here took ~21 us where the same
 * answer from the Python handler took ~28-39 us (os.getxattr in a loop). */
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
	if (strncmp(name, "user.", 5) == 0 || strncmp(name, "system.posix_acl_", 17) == 0)
		return 0; /* stored: the Python handler answers (ACLs, when the kernel asks for them) */
	out.len = sizeof out;
	out.error = -ENODATA;
	out.unique = h.unique;
	/* if the reply cannot be written (the mount is going away), libfuse's own read will see it */
	return write(fd, &out, sizeof out) == (ssize_t)sizeof out;
}

ssize_t sr_fuseio_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n;
	int err;

	(void)userdata;
	for (;;) {
		if (features & SR_BATON) {
			int gone = sr_baton_take();
			if (gone) {
				errno = gone;
				return -1;
			}
		}
		do
			n = read(fd, buf, len);
		while (n > 0 && (answer_here(fd, buf, (size_t)n) || sr_fast_write(fd, buf, (size_t)n)));
		err = errno;
		serving = n > 0 ? sr_opcode_of(buf, (size_t)n) : 0;
		if (features & SR_BATON)
			sr_baton_after_read(buf, n, err); /* an FSYNC passes the baton on: it waits */
		if (n > 0 && sr_fast_fsync(fd, buf, (size_t)n))
			continue;
		break;
	}
	if (features & SR_SETID)
		sr_setid_saw_request(buf, n);
	errno = err;
	return n;
}

/* libfuse's fuse_invalidate_path always asks the kernel to drop the inode's pages too
 * (offset 0), and the kernel then waits for every page lock and writeback of that inode, which
 * may wait for a WRITE the daemon has yet to answer.  An offset below zero makes the kernel drop
 * the attributes alone (fuse_reverse_inval_inode), under spinlocks only. */
static void keep_pages(struct iovec *iov, int count)
{
	struct fuse_out_header h;
	struct fuse_notify_inval_inode_out arg;

	if (count < 2 || iov[0].iov_len < sizeof h || iov[1].iov_len < sizeof arg)
		return;
	memcpy(&h, iov[0].iov_base, sizeof h);
	if (h.unique != 0 || h.error != FUSE_NOTIFY_INVAL_INODE)
		return;
	memcpy(&arg, iov[1].iov_base, sizeof arg);
	arg.off = -1;
	arg.len = 0;
	memcpy(iov[1].iov_base, &arg, sizeof arg);
}

/* Make the kernel drop the attributes (never the pages) it caches for a path; safe from a thread
 * serving a request.  0, or a negative errno (-ENOENT: the kernel holds no inode for it). */
int sr_fuseio_invalidate_attrs(const char *path)
{
	int r;

	if (mounted == NULL)
		return -ENODEV;
	attrs_only = 1;
	r = fuse_invalidate_path(mounted, path);
	attrs_only = 0;
	return r;
}

/* The INIT reply (the first reply after install: the kernel sends nothing else before INIT is
 * answered).  Installed only when the kernel speaks 7.39 or later; libfuse 3.14's reply is the
 * 64-byte struct whose flags2 field it leaves zero. */
static void allow_direct_mmap(struct iovec *iov, int count)
{
	struct fuse_out_header h;
	struct fuse_init_out o;

	init_armed = 0;
	if (count != 2 || iov[0].iov_len != sizeof h || iov[1].iov_len < offsetof(struct fuse_init_out, flags2) + sizeof(uint32_t))
		return;
	memcpy(&h, iov[0].iov_base, sizeof h);
	memcpy(&o, iov[1].iov_base, offsetof(struct fuse_init_out, flags2) + sizeof(uint32_t));
	if (h.error != 0 || o.major != FUSE_KERNEL_VERSION)
		return;
	o.flags |= FUSE_INIT_EXT;
	o.flags2 |= SR_DIRECT_IO_ALLOW_MMAP_2;
	memcpy(iov[1].iov_base, &o, offsetof(struct fuse_init_out, flags2) + sizeof(uint32_t));
	dmmap = 1;
}

/* The opcode of the request the calling libfuse thread is serving (0 if unknown). */
int sr_fuseio_serving(void)
{
	return (int)serving;
}

int sr_fuseio_direct_mmap(void)
{
	return dmmap;
}

ssize_t sr_fuseio_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	if (attrs_only)
		keep_pages(iov, count);
	if (init_armed)
		allow_direct_mmap(iov, count);
	if (features & SR_SETID)
		sr_setid_before_reply(iov, count);
	return writev(fd, iov, count);
}

static const struct fuse_custom_io io = {
	.writev = sr_fuseio_writev,
	.read = sr_fuseio_read,
};

/* The parts in `wanted` switched on, and both parts' state fresh; returns the parts on. */
int sr_fuseio_reset(int wanted)
{
	features = wanted & (SR_SETID | SR_BATON | SR_DMMAP);
	init_armed = (features & SR_DMMAP) != 0;
	dmmap = 0;
	sr_setid_reset();
	sr_baton_reset();
	return features;
}

/* Called from the file system's init callback: on libfuse's thread answering INIT, before the
 * reply is written; `wanted` may be 0 (the I/O still goes through here, for keep_pages).
 * Returns 0 or a negative errno from libfuse. */
int sr_fuseio_install(int wanted)
{
	struct fuse_context *c = fuse_get_context();

	if (c == NULL || c->fuse == NULL)
		return -EINVAL;
	sr_fuseio_reset(wanted);
	mounted = c->fuse;
	struct fuse_session *se = fuse_get_session(c->fuse);
	return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

int sr_fuseio_abi_version(void)
{
	return SR_FUSEIO_ABI;
}
