/* Shared by the mount's /dev/fuse I/O (fuseio.c) and its two parts, each switched on or off at
 * install: the set-id shim (setid.c) and the reader baton (baton.c). */
#ifndef SR_FUSEIO_H
#define SR_FUSEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define SR_FUSEIO_ABI 5 /* sr_fuseio_abi_version(): the entry points' signatures */
#define SR_SETID 1      /* setid.c: the daemon clears set-id bits (FUSE_HANDLE_KILLPRIV_V2) */
#define SR_BATON 2      /* baton.c: one libfuse thread reads requests at a time */
#define SR_DMMAP 4      /* fuseio.c: the INIT reply allows shared mmap of direct-I/O files */

/* A request's opcode (0 if it is too short to have one). */
uint32_t sr_opcode_of(const char *req, size_t len);
/* Copies the request's fixed-size argument (what follows the header) into out; 0 if the request
 * is too short to hold it. */
int sr_arg_of(const char *req, size_t len, void *out, size_t size);

/* setid.c */
void sr_setid_reset(void);
void sr_setid_saw_request(const char *req, ssize_t n); /* on the thread that will serve it */
void sr_setid_before_reply(struct iovec *iov, int count);

/* fastwrite.c: answers a WRITE it can serve itself (1), or leaves it to libfuse (0) */
int sr_fast_write(int fd, const char *req, size_t len);
/* and an FSYNC of a registered handle (after the reader baton has been passed on: it waits) */
int sr_fast_fsync(int fd, const char *req, size_t len);

/* baton.c */
void sr_baton_reset(void);
int sr_baton_take(void); /* before read(2): 0, or ENODEV once the mount is gone */
void sr_baton_after_read(const char *req, ssize_t n, int err);

#endif
