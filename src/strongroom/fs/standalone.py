"""Standalone encrypted files (docs/FORMAT.md §7): a key envelope, then a file of §5.

Streaming in 1 MiB pieces both ways, so any size fits in constant memory.
"""

from __future__ import annotations

import itertools
import json
import mmap
import os
import stat
import struct
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from strongroom.fs import content, native
from strongroom.fs.config import ConfigError, kek_aad, passphrase_source, passphrase_source_key
from strongroom.fs.keys import EXPORT, WrongKey, open_sealed
from strongroom.fs.names import b64u, unb64u

T = TypeVar("T")
MAGIC = b"SRE1"
PIECE = 256 * content.BLOCK  # plaintext per read and per sealing job: 1 MiB
FILE_JOB = 4 * PIECE  # from a regular file: per sealing job (read and sealed in 64 KiB chunks)
MAX_ENVELOPE = 1 << 16


class NotStandalone(Exception):
    """The input is not a standalone Strongroom file, or its envelope is corrupt."""


@dataclass(frozen=True)
class Envelope:
    volume_id: bytes
    key_source: dict[str, Any] | None  # None: keyed by the volume with this id

    def encode(self) -> bytes:
        body = json.dumps({"volume_id": b64u(self.volume_id), "key_source": self.key_source}, sort_keys=True).encode()
        return MAGIC + struct.pack(">I", len(body)) + body


def read_envelope(src: IO[bytes]) -> Envelope:
    head = src.read(8)
    if len(head) < 8 or head[:4] != MAGIC:
        raise NotStandalone("not a Strongroom encrypted file (bad magic)")
    (length,) = struct.unpack(">I", head[4:])
    if length > MAX_ENVELOPE:
        raise NotStandalone("envelope too large")
    body = src.read(length)
    try:
        raw = json.loads(body)
        return Envelope(unb64u(raw["volume_id"]), raw["key_source"])
    except (ValueError, KeyError, TypeError) as e:
        raise NotStandalone(f"corrupt envelope ({type(e).__name__})") from None


def _read_full(src: IO[bytes], n: int) -> bytes:
    parts, have = [], 0
    while have < n:
        chunk = src.read(n - have)
        if not chunk:
            break
        parts.append(chunk)
        have += len(chunk)
    return b"".join(parts)


def default_threads() -> int:
    """Sealing threads: one per CPU this process may run on."""
    return max(1, len(os.sched_getaffinity(0)))


def _readinto_full(src: IO[bytes], buf: memoryview) -> int:
    have = 0
    while have < len(buf):
        got = src.readinto(buf[have:])  # type: ignore[attr-defined]
        if not got:
            break
        have += got
    return have


def _buffer(size: int) -> memoryview:
    # Page-aligned (mmap), unlike a bytearray: the kernel copies into it three times faster here.
    return memoryview(mmap.mmap(-1, size))


def _pipeline(threads: int) -> _Pool:
    return ThreadPoolExecutor(threads, thread_name_prefix="strongroom-seal") if threads > 1 else _Inline()


def encrypt_stream(
    src: IO[bytes], dst: IO[bytes], volume_id: bytes, kek: bytes, key_source: dict[str, Any] | None, threads: int = 0
) -> int:
    """Write src encrypted to dst; returns the plaintext size.

    Pieces are read into reused buffers and sealed by ``threads`` threads (default: one per CPU;
    the block loop runs without the GIL) while the next piece is read and the previous one
    written, in order, so the output is the stream one thread would write."""
    threads = threads or default_threads()
    dst.write(Envelope(volume_id, key_source).encode())
    header = content.FileHeader.fresh(EXPORT)
    dst.write(header.encode(kek, volume_id))
    cipher = content.FileCipher(header)
    with _pipeline(threads) as pool:
        fd = _regular_fd(src)
        if fd is not None:
            total = _seal_file(fd, src.tell(), pool, threads, cipher, dst)
        else:
            slots = [(_buffer(PIECE), _buffer(content.sealed_size(PIECE))) for _ in range(threads + 1)]
            total = _seal_stream(src, pool, slots, cipher, dst)
    dst.write(cipher.seal_end(total))
    return total


def _regular_fd(src: IO[bytes]) -> int | None:
    try:
        fd = src.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (OSError, AttributeError, ValueError):  # BytesIO and friends: no descriptor
        return None


def _seal_stream(
    src: IO[bytes], pool: _Pool, slots: list[tuple[memoryview, memoryview]], cipher: content.FileCipher, dst: IO[bytes]
) -> int:
    """A pipe or socket: this thread reads each piece, the pool seals it."""
    total, index = 0, 0
    queue: deque[tuple[Future[int], memoryview]] = deque()
    for inp, out in itertools.cycle(slots):
        _drain(queue, dst, until_free=out)
        n = _readinto_full(src, inp)
        if n:
            queue.append((pool.submit(cipher.seal_into, index, inp[:n], out), out))
            total += n
            index += n // content.BLOCK
        if n < PIECE:
            break
    _drain(queue, dst)
    return total


def _seal_file(fd: int, start: int, pool: _Pool, threads: int, cipher: content.FileCipher, dst: IO[bytes]) -> int:
    """A regular file: each job reads its own range and seals it, 64 KiB at a time, in one call
    without the GIL (FileCipher.seal_from_fd), so the copy out of the page cache runs on every core
    and each chunk is still in that core's cache when it is sealed.  The first short job is the
    end: anything read after it (the file grew meanwhile) is dropped."""
    slots = [(_buffer(native.CHUNK), _buffer(content.sealed_size(FILE_JOB))) for _ in range(threads + 1)]

    def job(offset: int, scratch: memoryview, out: memoryview) -> tuple[int, int]:
        return cipher.seal_from_fd(fd, offset, (offset - start) // content.BLOCK, FILE_JOB, scratch, out)

    total, ended = 0, False
    queue: deque[tuple[Future[tuple[int, int]], memoryview]] = deque()

    def write_oldest() -> None:
        nonlocal total, ended
        done, ready = queue.popleft()
        n, sealed = done.result()
        if not ended:
            dst.write(ready[:sealed])
            total += n
            ended = n < FILE_JOB

    for i, (scratch, out) in enumerate(itertools.cycle(slots)):
        while queue and any(o is out for _, o in queue):
            write_oldest()
        if ended:
            break
        queue.append((pool.submit(job, start + i * FILE_JOB, scratch, out), out))
    while queue:
        write_oldest()
    return total


def _drain(queue: deque[tuple[Future[int], memoryview]], dst: IO[bytes], until_free: memoryview | None = None) -> None:
    """Write finished pieces in order: all of them, or until ``until_free`` is no longer in flight."""
    while queue and (until_free is None or any(out is until_free for _, out in queue)):
        done, ready = queue.popleft()
        dst.write(ready[: done.result()])


class _Inline:
    """A one-thread stand-in for ThreadPoolExecutor: runs each job at submit."""

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        f: Future[T] = Future()
        f.set_result(fn(*args))
        return f

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_Pool = ThreadPoolExecutor | _Inline


def encrypt_with_passphrase(src: IO[bytes], dst: IO[bytes], passphrase: str, threads: int = 0) -> int:
    volume_id, kek = os.urandom(16), os.urandom(32)
    # one seal per source key: the envelope keeps the unsalted form (FORMAT.md §7)
    return encrypt_stream(src, dst, volume_id, kek, passphrase_source(kek, volume_id, passphrase, version=4), threads)


def decrypt_stream(src: IO[bytes], dst: IO[bytes], kek_for: Callable[[Envelope], list[bytes]], threads: int = 0) -> int:
    """Write src's plaintext to dst; ``kek_for`` turns the envelope into the KEKs that may have
    made it (a volume's current KEK and its retired ones), or raises.  content.DamagedFile on
    any block that fails authentication and on a cut file.  Pieces are opened by ``threads``
    threads and written in order, like encrypt_stream's."""
    threads = threads or default_threads()
    env = read_envelope(src)
    header = _header(_read_full(src, content.HEADER), kek_for(env), env.volume_id)
    cipher = content.FileCipher(header)
    step = PIECE // content.BLOCK * content.CBLOCK
    # Each read lands after the carry: the bytes of the last piece that may be the end marker.
    slots = [(_buffer(step + content.CBLOCK + content.END_MARKER), _buffer(PIECE)) for _ in range(threads + 1)]
    total, index, carry = 0, 0, b""
    with _pipeline(threads) as pool:
        queue: deque[tuple[Future[int], memoryview]] = deque()
        for inp, out in itertools.cycle(slots):
            _drain(queue, dst, until_free=out)
            inp[: len(carry)] = carry
            n = _readinto_full(src, inp[len(carry) : len(carry) + step])
            have = len(carry) + n
            last = n < step
            if not last:  # more may follow: open whole blocks, keep room for the end marker
                usable = (have - content.END_MARKER) // content.CBLOCK * content.CBLOCK
            elif have < content.END_MARKER:
                raise content.DamagedFile("the file was cut (no end marker)", block=index)
            else:
                usable = have - content.END_MARKER
            carry = bytes(inp[usable:have])
            if usable:
                queue.append((pool.submit(cipher.open_into, index, inp[:usable], out), out))
                total += usable // content.CBLOCK * content.BLOCK + max(0, usable % content.CBLOCK - content.OVERHEAD)
                index += -(-usable // content.CBLOCK)
            if last:
                break
        _drain(queue, dst)
    cipher.open_end(carry, total)
    return total


def _header(raw: bytes, keks: list[bytes], volume_id: bytes) -> content.FileHeader:
    for kek in keks[:-1]:
        try:
            return content.FileHeader.decode(raw, kek, volume_id, EXPORT, unkinded=True)
        except content.DamagedFile:
            continue
    return content.FileHeader.decode(raw, keks[-1], volume_id, EXPORT, unkinded=True)  # the last one's error is the answer


def kek_from_passphrase(env: Envelope, passphrase: str) -> bytes:
    """The KEK of a passphrase-keyed standalone file."""
    source = env.key_source
    if not source or source.get("type") != "passphrase":
        raise ConfigError("this file is not keyed by a passphrase")
    try:
        sealed = unb64u(source["sealed_kek"])
    except (KeyError, TypeError, ValueError):
        raise NotStandalone("corrupt key source in the envelope") from None
    try:
        return open_sealed(
            passphrase_source_key(source, passphrase), kek_aad(env.volume_id, "passphrase"), sealed, "the file key"
        )
    except WrongKey:
        raise ConfigError("wrong passphrase") from None
