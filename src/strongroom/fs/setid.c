/* The set-id shim: the daemon, not the kernel, clears set-user-ID and set-group-ID bits.
 *
 * libfuse 3.14 (Debian 12's) builds its INIT reply only from the capabilities it knows, and it
 * does not know FUSE_HANDLE_KILLPRIV_V2 (kernel 5.11, protocol 7.33).  Without it the kernel
 * checks for privileges to drop itself, with requests of its own: a GETXATTR of
 * security.capability before every write(2) and a GETATTR before every chown(2), three of the
 * eleven requests a small file costs in a tar extract.  With it the kernel asks once per file and
 * leaves the clearing to the file system, telling it when: a flag in WRITE, SETATTR (truncate)
 * and OPEN (O_TRUNC) requests from callers without CAP_FSETID.
 *
 * So, through fuseio.c's I/O:
 *   - the first reply written after install, which is the INIT reply (the kernel sends nothing
 *     else before INIT is answered), gets FUSE_HANDLE_KILLPRIV_V2 added to its flags;
 *   - each request read records, for the thread that serves it (libfuse's worker threads read a
 *     request and serve it on the same thread), whether it carries the kernel's "clear set-id
 *     bits" flag: sr_fuseio_kill_suidgid() answers that for the request being served.
 */
#define _GNU_SOURCE
#include <linux/fuse.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "fuseio.h"

static volatile int armed;   /* the next reply written is the INIT reply */
static volatile int patched; /* it went out with FUSE_HANDLE_KILLPRIV_V2 */
static __thread int kill_suidgid;

static int carries_kill(const char *req, size_t len)
{
	struct fuse_write_in w;
	struct fuse_setattr_in s;
	struct fuse_open_in o;

	switch (sr_opcode_of(req, len)) {
	case FUSE_WRITE:
		return sr_arg_of(req, len, &w, sizeof w) && (w.write_flags & FUSE_WRITE_KILL_SUIDGID);
	case FUSE_SETATTR:
		return sr_arg_of(req, len, &s, sizeof s) && (s.valid & FATTR_KILL_SUIDGID);
	case FUSE_OPEN:
		return sr_arg_of(req, len, &o, sizeof o) && (o.open_flags & FUSE_OPEN_KILL_SUIDGID);
	default:
		return 0;
	}
}

void sr_setid_reset(void)
{
	patched = 0;
	armed = 1;
}

void sr_setid_saw_request(const char *req, ssize_t n)
{
	kill_suidgid = n > 0 && carries_kill(req, (size_t)n);
}

void sr_setid_before_reply(struct iovec *iov, int count)
{
	if (armed && count == 2 && iov[0].iov_len == sizeof(struct fuse_out_header) &&
	    iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t)) {
		struct fuse_out_header *h = iov[0].iov_base;
		struct fuse_init_out *o = iov[1].iov_base;
		armed = 0;
		/* libfuse 3.14 answers with protocol 7.31; the kernel reads the flag whatever the
		 * minor (the shim is only installed when the kernel offered it) */
		if (h->error == 0 && o->major == FUSE_KERNEL_VERSION) {
			o->flags |= FUSE_HANDLE_KILLPRIV_V2;
			patched = 1;
		}
	}
}

int sr_fuseio_patched(void)
{
	return patched;
}

int sr_fuseio_kill_suidgid(void)
{
	return kill_suidgid;
}
