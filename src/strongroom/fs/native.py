"""The compiled block loop (blockcrypt.c -> libsrblocks.so, built by the package build,
setup.py, against the OS's libcrypto): seals and opens a whole request of 4 KiB blocks in one call, with the GIL
released.  Without the build, content.FileCipher runs the same format through pyca/cryptography
one block at a time (slower, identical bytes: the tests hold the two to each other).
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

from strongroom import helpers

LIBRARY = Path(__file__).with_name("libsrblocks.so")


class BadBlock(Exception):
    def __init__(self, block: int) -> None:
        super().__init__(f"block {block} does not authenticate")
        self.block = block


@functools.lru_cache(maxsize=1)
def lib() -> ctypes.CDLL | None:
    so = helpers.load(LIBRARY, ("sr_abi_version", ABI), use_errno=True)
    if so is None:  # content.FileCipher's Python path serves
        return None
    vp, size, u64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64
    so.sr_seal_blocks.restype = ctypes.c_long
    so.sr_seal_blocks.argtypes = [ctypes.c_char_p, size, ctypes.c_char_p, size, u64, vp, size, ctypes.c_char_p, size, vp, size]
    so.sr_open_blocks.restype = ctypes.c_long
    so.sr_open_blocks.argtypes = [ctypes.c_char_p, size, ctypes.c_char_p, size, u64, vp, size, vp, size, ctypes.POINTER(u64), u64]
    so.sr_pread_seal.restype = ctypes.c_long
    so.sr_pread_seal.argtypes = [
        ctypes.c_int,
        ctypes.c_int64,
        size,
        ctypes.c_char_p,
        size,
        ctypes.c_char_p,
        size,
        u64,
        ctypes.c_char_p,
        size,
        vp,
        size,
        vp,
        size,
        ctypes.POINTER(u64),
    ]
    return so


ABI = 2  # sr_abi_version() in blockcrypt.c: the entry points' signatures


def available() -> bool:
    return lib() is not None


def _addr(buf: memoryview) -> int:
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(buf))
    except TypeError:  # read-only (a slice of bytes): numpy takes those where ctypes will not
        import numpy as np

        return int(np.frombuffer(buf, dtype=np.uint8).ctypes.data)


BLOCK, NONCE, TAG = 4096, 12, 16
BAD_LENGTH = -3  # SR_EBADLEN in blockcrypt.c
CBLOCK = NONCE + BLOCK + TAG


def seal(so: ctypes.CDLL, key: bytes, file_id: bytes, first: int, plain: memoryview, nonces: bytes, out: memoryview) -> int:
    blocks = -(-plain.nbytes // BLOCK)
    # The C loop trusts its sizes: check them here, where a mistake is an exception, not a smash.
    if out.readonly or out.nbytes < plain.nbytes + (NONCE + TAG) * blocks or len(nonces) < NONCE * blocks:
        raise ValueError("output buffer is read-only or too small, or too few nonces")
    if len(key) != 32 or len(file_id) != 16:
        raise ValueError("bad key or file id length")
    if not plain.nbytes:
        return 0
    n = int(
        so.sr_seal_blocks(
            key, len(key), file_id, len(file_id), first, _addr(plain), plain.nbytes, nonces, len(nonces), _addr(out), out.nbytes
        )
    )
    if n == BAD_LENGTH:
        raise ValueError("a buffer is too small for the blocks (refused by the helper)")
    if n < 0:
        raise RuntimeError("OpenSSL failed to seal")
    return n


CHUNK = 16 * BLOCK  # SR_CHUNK in blockcrypt.c


def pread_seal(
    so: ctypes.CDLL,
    fd: int,
    offset: int,
    length: int,
    key: bytes,
    file_id: bytes,
    first: int,
    nonces: bytes,
    scratch: memoryview,
    out: memoryview,
) -> tuple[int, int]:
    """Up to ``length`` bytes of ``fd`` from ``offset``, read and sealed in cache-sized chunks in
    one call; returns (plaintext bytes read, sealed bytes written).  Stops at end of file."""
    blocks = length // BLOCK
    if length % BLOCK or offset < 0 or len(nonces) < NONCE * blocks:
        raise ValueError("length must be whole blocks, with a nonce for each")
    if scratch.readonly or scratch.nbytes < CHUNK or out.readonly or out.nbytes < length + (NONCE + TAG) * blocks:
        raise ValueError("scratch or output buffer is read-only or too small")
    if len(key) != 32 or len(file_id) != 16:
        raise ValueError("bad key or file id length")
    nread = ctypes.c_uint64(0)
    n = int(
        so.sr_pread_seal(
            fd,
            offset,
            length,
            key,
            len(key),
            file_id,
            len(file_id),
            first,
            nonces,
            len(nonces),
            _addr(scratch),
            scratch.nbytes,
            _addr(out),
            out.nbytes,
            ctypes.byref(nread),
        )
    )
    if n == BAD_LENGTH:
        raise ValueError("a buffer is too small for the blocks (refused by the helper)")
    if n == -2:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    if n < 0:
        raise RuntimeError("OpenSSL failed to seal")
    return nread.value, n


def open_(
    so: ctypes.CDLL, key: bytes, file_id: bytes, first: int, sealed: memoryview, out: memoryview, hole_limit: int = 0
) -> int:
    """Open consecutive sealed blocks from block ``first``; blocks numbered below ``hole_limit``
    may be holes (all-zero: they open to zeros)."""
    whole, rest = divmod(sealed.nbytes, CBLOCK)
    if out.readonly or out.nbytes < whole * BLOCK + max(0, rest - NONCE - TAG):
        raise ValueError("output buffer is read-only or too small")
    if len(key) != 32 or len(file_id) != 16:
        raise ValueError("bad key or file id length")
    if not sealed.nbytes:
        return 0
    if 0 < rest <= NONCE + TAG:  # a tail too short to hold a byte: damage, before any buffer is touched
        raise BadBlock(first + whole)
    bad = ctypes.c_uint64(0)
    n = int(
        so.sr_open_blocks(
            key,
            len(key),
            file_id,
            len(file_id),
            first,
            _addr(sealed),
            sealed.nbytes,
            _addr(out),
            out.nbytes,
            ctypes.byref(bad),
            hole_limit,
        )
    )
    if n == BAD_LENGTH:
        raise ValueError("the output buffer is too small for the blocks (refused by the helper)")
    if n == -2:
        raise BadBlock(bad.value)
    if n < 0:
        raise RuntimeError("OpenSSL failed to open")
    return n
