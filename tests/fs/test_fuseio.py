"""The compiled /dev/fuse I/O (fuseio.c) and its two parts, the set-id shim (setid.c) and the
reader baton (baton.c), driven on a socket pair that keeps message boundaries as /dev/fuse does:
no kernel mount, so each part is checked on its own, switched on and off.  (Mounted, both parts
are covered by test_setid.py, which runs with the shim on and off.)"""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from strongroom.fs import fuseio

pytestmark = pytest.mark.unit

GETATTR, SETATTR, OPEN, WRITE, GETXATTR = 3, 4, 14, 16, 22
FUSE_WRITE_KILL_SUIDGID = 1 << 2
FATTR_KILL_SUIDGID = 1 << 11
FUSE_OPEN_KILL_SUIDGID = 1 << 0
FUSE_HANDLE_KILLPRIV_V2 = 1 << 28
HEADER = struct.Struct("<IIQQIIIHH")  # struct fuse_in_header
BODY = 128  # room for every fixed argument used here


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


@pytest.fixture(scope="module")
def so() -> ctypes.CDLL:
    assert fuseio.available(), "the package build (setup.py) builds libsrfuseio.so"
    # A CDLL of its own (fuseio's handle keeps the GIL): reads here block, with other threads running.
    lib = ctypes.CDLL(str(fuseio.LIBRARY), use_errno=True)
    lib.sr_fuseio_read.restype = ctypes.c_ssize_t
    lib.sr_fuseio_read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.sr_fuseio_writev.restype = ctypes.c_ssize_t
    lib.sr_fuseio_writev.argtypes = [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_int, ctypes.c_void_p]
    lib.sr_fuseio_reset.argtypes = [ctypes.c_int]
    return lib


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(the kernel's end, the daemon's end)"""
    kernel, daemon = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    yield kernel, daemon
    kernel.close()
    daemon.close()


def request(opcode: int, unique: int, body: bytes = b"") -> bytes:
    body = body.ljust(BODY, b"\0") if opcode != GETXATTR else body
    return HEADER.pack(HEADER.size + len(body), opcode, unique, 1, 0, 0, 0, 0, 0) + body


def write_in(size: int, write_flags: int = 0) -> bytes:
    return struct.pack("<QQIIQII", 1, 0, size, write_flags, 0, 0, 0)


def getxattr(name: bytes, unique: int) -> bytes:
    return request(GETXATTR, unique, struct.pack("<II", 0, 0) + name + b"\0")


def read(so: ctypes.CDLL, daemon: socket.socket) -> bytes:
    buf = ctypes.create_string_buffer(1 << 16)
    n = so.sr_fuseio_read(daemon.fileno(), buf, len(buf), None)
    assert n >= 0, errno.errorcode[ctypes.get_errno()]
    return buf.raw[:n]


def opcode(req: bytes) -> tuple[int, int]:
    """(opcode, unique) of a request read"""
    _, op, unique, *_ = HEADER.unpack_from(req)
    return op, unique


# -- the set-id shim ---------------------------------------------------------------------------


def init_reply(so: ctypes.CDLL, daemon: socket.socket, kernel: socket.socket) -> int:
    """Writes an INIT reply (protocol 7.31, no flags) through the I/O; the flags the kernel gets."""
    out = ctypes.create_string_buffer(struct.pack("<IiQ", 16 + 64, 0, 1))
    init = ctypes.create_string_buffer(struct.pack("<IIII", 7, 31, 1 << 20, 0).ljust(64, b"\0"))
    iov = (_Iovec * 2)(_Iovec(ctypes.addressof(out), 16), _Iovec(ctypes.addressof(init), 64))
    assert so.sr_fuseio_writev(daemon.fileno(), iov, 2, None) == 80
    reply = kernel.recv(4096)
    return int(struct.unpack_from("<I", reply, 16 + 12)[0])


def test_the_shim_asks_for_killpriv_v2_in_the_init_reply_only(so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket]) -> None:
    kernel, daemon = pair
    so.sr_fuseio_reset(fuseio.SETID)
    assert not so.sr_fuseio_patched()
    assert init_reply(so, daemon, kernel) & FUSE_HANDLE_KILLPRIV_V2
    assert so.sr_fuseio_patched()
    assert init_reply(so, daemon, kernel) == 0  # only the first reply is INIT's


def test_without_the_shim_the_init_reply_goes_out_as_libfuse_made_it(
    so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket]
) -> None:
    kernel, daemon = pair
    so.sr_fuseio_reset(fuseio.BATON)
    assert init_reply(so, daemon, kernel) == 0
    assert not so.sr_fuseio_patched()


@pytest.mark.parametrize(
    ("op", "body", "kill"),
    [
        (WRITE, write_in(10, FUSE_WRITE_KILL_SUIDGID), 1),
        (WRITE, write_in(10), 0),
        (SETATTR, struct.pack("<I", FATTR_KILL_SUIDGID), 1),
        (SETATTR, struct.pack("<I", 1 << 3), 0),  # FATTR_SIZE alone: a truncate by root
        (OPEN, struct.pack("<II", 0, FUSE_OPEN_KILL_SUIDGID), 1),
        (OPEN, struct.pack("<II", 0, 0), 0),
        (GETATTR, b"\xff" * 16, 0),  # the flag's bit in another request means nothing
    ],
)
def test_the_shim_keeps_each_requests_kill_flag_for_its_thread(
    so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket], op: int, body: bytes, kill: int
) -> None:
    kernel, daemon = pair
    for parts in (fuseio.SETID, fuseio.SETID | fuseio.BATON):
        so.sr_fuseio_reset(parts)
        kernel.send(request(WRITE, 1, write_in(10, FUSE_WRITE_KILL_SUIDGID)))
        read(so, daemon)
        kernel.send(request(op, 2, body))
        read(so, daemon)
        assert so.sr_fuseio_kill_suidgid() == kill  # the last request's flag, not a leftover
    # the shim off: nothing is recorded (the flag keeps what the last request read with it left)
    so.sr_fuseio_reset(fuseio.SETID)
    kernel.send(request(GETATTR, 3))
    read(so, daemon)
    so.sr_fuseio_reset(fuseio.BATON)
    kernel.send(request(WRITE, 4, write_in(10, FUSE_WRITE_KILL_SUIDGID)))
    read(so, daemon)
    assert so.sr_fuseio_kill_suidgid() == 0


def test_a_short_request_carries_no_kill_flag(so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket]) -> None:
    kernel, daemon = pair
    so.sr_fuseio_reset(fuseio.SETID)
    kernel.send(request(WRITE, 1, write_in(10, FUSE_WRITE_KILL_SUIDGID)))
    read(so, daemon)
    kernel.send(HEADER.pack(HEADER.size + 8, WRITE, 2, 1, 0, 0, 0, 0, 0) + b"\xff" * 8)  # cut in its argument
    read(so, daemon)
    assert so.sr_fuseio_kill_suidgid() == 0


# -- GETXATTR outside user.* -------------------------------------------------------------------


@pytest.mark.parametrize("parts", [fuseio.SETID, fuseio.BATON])
def test_getxattr_outside_user_is_answered_in_c(so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket], parts: int) -> None:
    kernel, daemon = pair
    so.sr_fuseio_reset(parts)
    kernel.send(getxattr(b"security.capability", 7))
    kernel.send(getxattr(b"user.k", 8))
    assert opcode(read(so, daemon)) == (GETXATTR, 8)  # the first never reached the caller
    length, error, unique = struct.unpack("<IiQ", kernel.recv(4096))
    assert (length, error, unique) == (16, -errno.ENODATA, 7)


# -- the reader baton --------------------------------------------------------------------------

# the system call a thread is blocked in (/proc/self/task/TID/syscall's first field)
READ_SYSCALL = {"x86_64": 0, "aarch64": 63}[platform.machine()]


class Reader(threading.Thread):
    """A libfuse worker: reads one request with the I/O and serves it until told to go on (a
    thread that read a small request holds the baton until then)."""

    def __init__(self, so: ctypes.CDLL, daemon: socket.socket) -> None:
        super().__init__(daemon=True)
        self.so, self.sock = so, daemon
        self.got: bytes | None = None
        self.tid = 0
        self.done = threading.Event()

    def run(self) -> None:
        self.tid = threading.get_native_id()
        self.got = read(self.so, self.sock)
        self.done.wait(30)

    def in_read(self) -> bool:
        try:
            with open(f"/proc/self/task/{self.tid}/syscall") as f:
                return f.read().split()[0] == str(READ_SYSCALL)
        except (FileNotFoundError, IndexError):
            return False


@pytest.fixture
def readers(so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket]) -> Iterator[Callable[[int], list[Reader]]]:
    """start(n): n more worker threads.  All are let go at the end, and a closed socket wakes
    any still reading, so no thread outlives its test (a holder's exit counts in the baton)."""
    made: list[Reader] = []

    def start(n: int) -> list[Reader]:
        new = [Reader(so, pair[1]) for _ in range(n)]
        for t in new:
            t.start()
        made.extend(new)
        return new

    yield start
    pair[0].close()
    for t in made:
        t.done.set()
        t.join(10)


def served(t: Reader) -> tuple[int, int]:
    deadline = time.monotonic() + 5
    while t.got is None and time.monotonic() < deadline:
        time.sleep(0.002)
    assert t.got is not None, "the request was never read"
    return opcode(t.got)


def in_read_settled(threads: list[Reader], want: int) -> int:
    """How many of ``threads`` sit in read(2), once that count has reached ``want`` or 2 s passed."""
    deadline = time.monotonic() + 2
    while sum(t.in_read() for t in threads) != want and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)  # and stays there
    return sum(t.in_read() for t in threads)


def holding(so: ctypes.CDLL, kernel: socket.socket, readers: Callable[[int], list[Reader]], parts: int, first: bytes) -> Reader:
    """The I/O reset with ``parts`` on, and a worker that has read ``first`` and keeps serving it."""
    so.sr_fuseio_reset(parts)
    (holder,) = readers(1)
    kernel.send(first)
    served(holder)
    return holder


def test_a_small_request_keeps_the_other_threads_out_of_read(
    so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket], readers: Callable[[int], list[Reader]]
) -> None:
    kernel, _ = pair
    holder = holding(so, kernel, readers, fuseio.BATON, request(GETATTR, 1))
    assert holder.got is not None and opcode(holder.got) == (GETATTR, 1)
    waiting = readers(3)
    # One waiting thread times the holder and, with nothing taken for a while, reads alongside it
    # (a holder may be blocked); the other two wait outside read(2).
    assert in_read_settled(waiting, 1) == 1
    for i in range(3):  # each request read wakes the next waiting thread: none is left behind
        kernel.send(request(GETATTR, 10 + i))
    assert sorted(served(t)[1] for t in waiting) == [10, 11, 12]


def test_a_blocked_holder_does_not_stall_the_mount(
    so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket], readers: Callable[[int], list[Reader]]
) -> None:
    kernel, _ = pair
    holding(so, kernel, readers, fuseio.BATON, request(GETATTR, 1))  # holds the baton, never comes back
    (late,) = readers(1)
    time.sleep(0.05)
    kernel.send(request(GETATTR, 2))
    assert served(late) == (GETATTR, 2)


def test_a_big_request_lets_every_idle_thread_read(
    so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket], readers: Callable[[int], list[Reader]]
) -> None:
    kernel, _ = pair
    holding(so, kernel, readers, fuseio.BATON, request(WRITE, 1, write_in(1 << 20)))
    waiting = readers(3)
    assert in_read_settled(waiting, 3) == 3  # big reads and writes are served in parallel
    for i in range(3):
        kernel.send(request(GETATTR, 10 + i))
    assert sorted(served(t)[1] for t in waiting) == [10, 11, 12]


def test_without_the_baton_every_thread_reads(
    so: ctypes.CDLL, pair: tuple[socket.socket, socket.socket], readers: Callable[[int], list[Reader]]
) -> None:
    kernel, _ = pair
    holding(so, kernel, readers, fuseio.SETID, request(GETATTR, 1))
    waiting = readers(3)
    assert in_read_settled(waiting, 3) == 3
