"""Keeping a CPU awake while the mount is busy, so that a FUSE request does not wait for a sleeping
CPU to wake up.

Every FUSE request is a round trip: the program's system call wakes a daemon thread, the reply
wakes the program.  On virtual machines an idle virtual CPU halts, and waking a halted one costs
tens of microseconds, often more than the request's own work.  Go's runtime (gocryptfs's) keeps
threads spinning briefly for new work; this is the same idea outside the daemon's interpreter: a
small helper process, at nice 19, busy-waits for a short window after the mount was last
active, and sleeps otherwise.  A thread woken on its CPU takes the CPU over at its next
scheduling point (nice 19 weighs 15 against a normal thread's 1024).  SCHED_IDLE was measured
and not taken: it let the scheduler put woken threads on the helper's CPU and made a small-file
extract slower (measured: git show 7c4ab38:docs/BENCHMARKS.md).

Only a stream of requests wakes it: at least ``RUN`` in ``KICK_EVERY`` through the Python front
end, as a program walking or extracting a tree makes them, one after another, each waiting for
the last.  The compiled fast path (fastwrite.c: a database's in-place page writes and its fsyncs)
never does, nor do a few requests now and then: that traffic comes from many processes at once,
the CPUs are busy with them, and a spinning helper only takes their time (a database on the
mount ran measurably slower with it; BENCHMARKS.md, "Databases on the mount").

The helper is a fresh interpreter (it holds no keys), dies with the daemon (PR_SET_PDEATHSIG, and
end of file on its pipe) and costs one CPU only while requests are flowing plus ``WINDOW``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

WINDOW = 0.02  # seconds the helper keeps spinning after the last sign of activity
KICK_EVERY = 0.005  # the daemon tells the helper at most this often
RUN = 16  # requests counted over one KICK_EVERY that make a kick: a stream, not a few now and then

_HELPER = f"""
import ctypes, os, select, time
os.nice(19)
try:
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG: SIGKILL when the daemon dies
except (OSError, AttributeError):
    pass
clock, window = time.monotonic, {WINDOW}
poll = select.poll()
poll.register(0, select.POLLIN)
while os.read(0, 4096):  # sleep until the daemon is active (end of file: it is gone)
    deadline = clock() + window
    while clock() < deadline:
        if poll.poll(0):
            if not os.read(0, 4096):
                raise SystemExit
            deadline = clock() + window
"""


class KeepWarm:
    """The daemon's side: ``active()`` on every request (a count and one clock read; a pipe write
    at most every KICK_EVERY, when RUN requests came since the last look)."""

    def __init__(self) -> None:
        read_end, self._fd = os.pipe()
        os.set_blocking(self._fd, False)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-S", "-c", _HELPER],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except BaseException:
            os.close(self._fd)
            raise
        finally:
            os.close(read_end)
        self._next = 0.0
        self._seen = 0
        self._clock = time.monotonic

    def active(self) -> None:
        self._seen += 1
        now = self._clock()
        if now >= self._next:
            self._next = now + KICK_EVERY
            seen, self._seen = self._seen, 0
            if seen < RUN:
                return
            try:
                os.write(self._fd, b"k")
            except (BlockingIOError, BrokenPipeError):
                pass  # the helper is behind (it will spin anyway) or gone (nothing to keep warm)

    def close(self) -> None:
        os.close(self._fd)  # end of file: the helper exits
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
