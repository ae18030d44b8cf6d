/* A calling process's identity for the access checks (acl.py), in one call.
 *
 * The check runs on every open through a mount with access rules.  Done from Python it took five
 * system calls, each releasing and retaking the GIL while the daemon's other threads wanted it;
 * here the same reads happen in one ctypes call, with the GIL released once.
 *
 * out[0..8] = pid, start time (clock ticks since boot), the executable's st_dev, st_ino, st_size,
 * mtime and ctime (ns), the process's uid, its parent's pid.  Returns 0, or -errno (the process
 * is gone, or /proc could not be read).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* out[0..5] = the running executable's st_dev, st_ino, st_size, mtime and ctime (ns), then the
 * process's uid.  Returns 0 or -errno.
 *
 * The executable may be a file on the very mount being served (a program kept in the encrypted
 * tree).  A plain stat would then be a request to this daemon, made while it serves the caller,
 * and with the kernel's attribute cache off (--acl-timeout 0) it would wait on the daemon's own
 * threads (and forever, if the caller held the GIL).  AT_STATX_DONT_SYNC takes the attributes
 * the kernel already has; for a running image they are exact where it matters: its device and
 * inode cannot change while it runs, nor can its content (writing a running executable fails
 * with ETXTBSY). */
static int image_and_uid(int pid, long long out[6])
{
    char path[64];
    struct stat st;
    struct statx sx;
    snprintf(path, sizeof path, "/proc/%d/exe", pid);
    if (statx(AT_FDCWD, path, AT_STATX_DONT_SYNC, STATX_BASIC_STATS, &sx) != 0)
        return -errno;
    out[0] = (long long)makedev(sx.stx_dev_major, sx.stx_dev_minor);
    out[1] = (long long)sx.stx_ino;
    out[2] = (long long)sx.stx_size;
    out[3] = (long long)sx.stx_mtime.tv_sec * 1000000000LL + sx.stx_mtime.tv_nsec;
    out[4] = (long long)sx.stx_ctime.tv_sec * 1000000000LL + sx.stx_ctime.tv_nsec;
    snprintf(path, sizeof path, "/proc/%d", pid);
    if (stat(path, &st) != 0)
        return -errno;
    out[5] = (long long)st.st_uid;
    return 0;
}

int sr_proc_identity(int pid, long long out[9])
{
    char path[64], buf[1024];

    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int err = errno;
    close(fd);
    if (n <= 0)
        return n < 0 ? -err : -ESRCH;
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and ')': the fields resume after the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return -EINVAL;
    p++;
    long long ppid = -1, start = -1;
    for (int field = 3; field <= 22; field++) { /* field 4 is ppid, 22 is starttime (proc(5)) */
        char *end;
        while (*p == ' ')
            p++;
        if (*p == '\0')
            return -EINVAL;
        long long v = strtoll(p, &end, 10);
        if (field == 4)
            ppid = v;
        else if (field == 22)
            start = v;
        p = end;
        while (*p != ' ' && *p != '\0')
            p++; /* field 3 is the state letter: no digits */
    }
    err = image_and_uid(pid, out + 2);
    if (err != 0)
        return err;
    out[0] = pid;
    out[1] = start;
    out[8] = ppid;
    return 0;
}


/* 1 while the process behind pidfd runs, 0 once it has exited, -errno if poll failed. */
static int alive(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN, .revents = 0};
    int r = poll(&p, 1, 0);
    if (r < 0)
        return -errno;
    return r == 0;
}

/* The cheap re-check of a process already identified: pidfd (from pidfd_open) still refers to
 * a running process, so pid has not been reused, and out[0..5] = its executable's st_dev, st_ino,
 * st_size, mtime and ctime (ns) and its uid, read between two liveness checks (the process ran
 * throughout, so they are its own).  No read of /proc/PID/stat, which the kernel formats field by
 * field and which cost about half of every access check.  Returns 0, or -ESRCH if it exited. */
int sr_proc_recheck(int pid, int pidfd, long long out[6])
{
    if (alive(pidfd) != 1)
        return -ESRCH;
    int err = image_and_uid(pid, out);
    if (err != 0)
        return err;
    return alive(pidfd) == 1 ? 0 : -ESRCH;
}
