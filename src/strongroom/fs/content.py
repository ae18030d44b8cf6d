"""File contents (docs/FORMAT.md §5): an 84-byte authenticated header, then 4 KiB blocks, each
sealed with AES-256-GCM under the file key with AAD = file id || block number.

Block work is batched: one getrandom call gives the nonces of a whole request, and the compiled
loop (fs/native.py: one call per request, GIL released) seals or opens all its blocks; without
that build one AESGCM object serves the file and each block is one call into pyca/cryptography.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from struct import pack_into

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from strongroom.fs import keys, native

MAGIC = b"SRF1"
VERSION = 1
VERSION_KINDED = 2  # format version 5's header: bytes 6-7 hold the object kind
HEADER = 84
PREFIX = 24  # magic, version, flags, file id: the AAD of the wrapped file key
BLOCK = 4096
NONCE = 12
TAG = 16
OVERHEAD = NONCE + TAG
CBLOCK = BLOCK + OVERHEAD  # 4124
END_INDEX = b"\xff" * 8  # the block number of a standalone file's end marker
END_MARKER = NONCE + 8 + TAG
MAX_BLOCKS_PER_KEY = 1 << 32  # random 96-bit nonces: SP 800-38D's bound per key
ZERO_BLOCK = bytes(BLOCK)
ZERO_CBLOCK = bytes(CBLOCK)  # a hole, as a lower file stores it (format version 3)


class DamagedFile(Exception):
    """A header or block failed authentication, or the file's size is impossible."""

    def __init__(self, message: str, block: int | None = None) -> None:
        super().__init__(message)
        self.block = block


@dataclass(frozen=True)
class FileHeader:
    """A file's id and key.  ``kind`` (format version 5) is what the content is -- keys.FILE,
    SYMLINK or EXPORT -- written as header version 2 with the kind in bytes 6-7, inside the
    authenticated prefix, and the key wrapped under a subkey of the KEK named by the file id;
    kind 0 is the header of versions 1-4 (version 1, flags 0, the key under the KEK itself)."""

    file_id: bytes
    file_key: bytes
    kind: int = 0

    @classmethod
    def fresh(cls, kind: int = 0) -> FileHeader:
        return cls(os.urandom(16), os.urandom(32), kind)

    def prefix(self) -> bytes:
        return MAGIC + struct.pack(">HH", VERSION_KINDED if self.kind else VERSION, self.kind) + self.file_id

    def encode(self, kek: bytes, volume_id: bytes) -> bytes:
        p = self.prefix()
        aad = keys.wrap_aad("file", volume_id, p)
        if self.kind:  # the file id is a fresh 128-bit salt: one seal per subkey
            return p + keys.seal(keys.subkey(kek, "file", self.file_id), aad, self.file_key)
        return p + keys.seal(kek, aad, self.file_key)

    @classmethod
    def decode(cls, raw: bytes, kek: bytes, volume_id: bytes, kind: int = 0, unkinded: bool = False) -> FileHeader:
        """The header of an object of ``kind`` (0: a version 1-4 volume's header); ``unkinded``
        also accepts a kind-0 header (a standalone file made before version 5)."""
        if len(raw) < HEADER:
            raise DamagedFile("header is truncated")
        if raw[:4] != MAGIC:
            raise DamagedFile("not a Strongroom file (bad magic)")
        version, flags = struct.unpack(">HH", raw[4:8])
        found = flags if version == VERSION_KINDED else 0
        if not ((version == VERSION and flags == 0) or (version == VERSION_KINDED and flags in keys.KIND_NAMES)):
            raise DamagedFile(f"unsupported file version {version} or flags {flags}")
        if found != kind and not (unkinded and found == 0):
            if found and kind:
                raise DamagedFile(f"object kind: {keys.KIND_NAMES[found]} where {keys.KIND_NAMES[kind]} belongs")
            raise DamagedFile(f"unsupported file version {version} or flags {flags} in this volume")
        try:
            wrapping = keys.subkey(kek, "file", raw[8:PREFIX]) if found else kek
            key = keys.open_sealed(wrapping, keys.wrap_aad("file", volume_id, raw[:PREFIX]), raw[PREFIX:HEADER], "the file key")
        except keys.WrongKey:
            raise DamagedFile("header does not authenticate") from None
        return cls(raw[8:PREFIX], key, found)


def plain_size(lower_size: int) -> int:
    """Plaintext size of a lower file; DamagedFile when no valid file has that size."""
    if lower_size == 0:
        return 0
    if lower_size < HEADER + OVERHEAD + 1:
        raise DamagedFile(f"impossible size {lower_size}")
    q, r = divmod(lower_size - HEADER, CBLOCK)
    if 0 < r <= OVERHEAD:
        raise DamagedFile(f"impossible size {lower_size}", block=q)
    return q * BLOCK + (r - OVERHEAD if r else 0)


def lower_size(plain: int) -> int:
    if plain == 0:
        return 0
    q, r = divmod(plain, BLOCK)
    return HEADER + q * CBLOCK + (r + OVERHEAD if r else 0)


def sealed_size(plain: int) -> int:
    """Bytes that ``plain`` bytes of whole blocks (the last may be partial) take sealed."""
    return plain + OVERHEAD * -(-plain // BLOCK)


def block_offset(index: int) -> int:
    return HEADER + index * CBLOCK


class FileCipher:
    """Seals and opens the blocks of one file."""

    def __init__(self, header: FileHeader, compiled: bool = True) -> None:
        """``compiled=False`` runs the pyca/cryptography loop even when the compiled one is built."""
        self.file_id = header.file_id
        self._key = header.file_key
        self._gcm = AESGCM(header.file_key)
        self._native = native.lib() if compiled else None

    @property
    def key(self) -> bytes:
        """The file key, for the compiled write path alone (fastwrite.py)."""
        return self._key

    def seal(self, first: int, plaintext: bytes | bytearray | memoryview) -> bytes:
        """Blocks first, first+1, ... of plaintext (every block full but the last)."""
        view = memoryview(plaintext)
        if self._native is not None:
            out_buf = bytearray(sealed_size(len(view)))
            return bytes(out_buf[: self.seal_into(first, view, memoryview(out_buf))])
        n = -(-len(view) // BLOCK)
        if first + n > MAX_BLOCKS_PER_KEY:
            raise DamagedFile("this file key has sealed as many blocks as it safely can; reencrypt the file")
        nonces = os.urandom(NONCE * n)
        out = []
        fid, enc = self.file_id, self._gcm.encrypt
        for k in range(n):
            nonce = nonces[NONCE * k : NONCE * (k + 1)]
            out.append(nonce)
            out.append(enc(nonce, view[BLOCK * k : BLOCK * (k + 1)], fid + (first + k).to_bytes(8, "big")))
        return b"".join(out)

    def seal_into(self, first: int, plaintext: memoryview, out: memoryview) -> int:
        """Like seal, written into ``out`` (at least sealed_size(len(plaintext)) bytes); returns
        the bytes written.  No allocation per block: the FUSE write path's form."""
        n = -(-len(plaintext) // BLOCK)
        if first + n > MAX_BLOCKS_PER_KEY:
            raise DamagedFile("this file key has sealed as many blocks as it safely can; reencrypt the file")
        if self._native is not None:
            return native.seal(self._native, self._key, self.file_id, first, plaintext, os.urandom(NONCE * n), out)
        nonces = memoryview(os.urandom(NONCE * n))
        enc = self._gcm.encrypt_into
        aad = bytearray(self.file_id + bytes(8))
        at = 0
        for k in range(n):
            block = plaintext[BLOCK * k : BLOCK * (k + 1)]
            nonce = nonces[NONCE * k : NONCE * (k + 1)]
            out[at : at + NONCE] = nonce
            pack_into(">Q", aad, 16, first + k)
            enc(nonce, block, aad, out[at + NONCE : at + NONCE + len(block) + TAG])
            at += NONCE + len(block) + TAG
        return at

    def seal_from_fd(
        self, fd: int, offset: int, first: int, length: int, scratch: memoryview, out: memoryview
    ) -> tuple[int, int]:
        """Up to ``length`` bytes (whole blocks) of ``fd`` from ``offset``, sealed as blocks first,
        first+1, ... into ``out``; returns (plaintext bytes read, sealed bytes written).  Stops at
        end of file.  Compiled: read and sealed in 64 KiB chunks through ``scratch`` (at least
        native.CHUNK bytes) in one call; otherwise the same, chunk by chunk in Python."""
        n = length // BLOCK
        if first + n > MAX_BLOCKS_PER_KEY:
            raise DamagedFile("this file key has sealed as many blocks as it safely can; reencrypt the file")
        if self._native is not None:
            return native.pread_seal(
                self._native, fd, offset, length, self._key, self.file_id, first, os.urandom(NONCE * n), scratch, out
            )
        done = at = 0
        while done < length:
            want = min(native.CHUNK, length - done)
            have = 0
            while have < want and (got := os.preadv(fd, [scratch[have:want]], offset + done + have)):
                have += got
            if not have:
                break
            at += self.seal_into(first + done // BLOCK, scratch[:have], out[at:])
            done += have
            if have < want:
                break
        return done, at

    def open_into(self, first: int, ciphertext: memoryview, out: memoryview, hole_limit: int = 0) -> int:
        """Like open, written into ``out``; returns the plaintext bytes written.  Full-size blocks
        numbered below ``hole_limit`` whose stored bytes are all zero are holes and open to zeros
        (a version-3 volume's file: every block but its last may be one)."""
        if self._native is not None:
            try:
                return native.open_(self._native, self._key, self.file_id, first, ciphertext, out, hole_limit)
            except native.BadBlock as e:
                what = "is truncated" if _is_short_tail(len(ciphertext), e.block - first) else "does not authenticate"
                raise DamagedFile(f"block {e.block} {what}", block=e.block) from None
        dec, total = self._gcm.decrypt_into, len(ciphertext)
        aad = bytearray(self.file_id + bytes(8))  # the block number is packed in place per block
        whole = total // CBLOCK
        k = 0
        try:
            for k in range(whole):  # the hot loop: full blocks, no allocation but the AAD's bytes
                s = k * CBLOCK
                if first + k < hole_limit and ciphertext[s] == 0 and ciphertext[s : s + CBLOCK] == ZERO_CBLOCK:
                    out[k * BLOCK : (k + 1) * BLOCK] = ZERO_BLOCK
                    continue
                pack_into(">Q", aad, 16, first + k)
                dec(ciphertext[s : s + NONCE], ciphertext[s + NONCE : s + CBLOCK], aad, out[k * BLOCK : (k + 1) * BLOCK])
            at = whole * BLOCK
            if total > whole * CBLOCK:
                k = whole
                tail = ciphertext[whole * CBLOCK :]
                if len(tail) <= OVERHEAD:
                    raise DamagedFile(f"block {first + k} is truncated", block=first + k)
                pack_into(">Q", aad, 16, first + k)
                dec(tail[:NONCE], tail[NONCE:], aad, out[at : at + len(tail) - OVERHEAD])
                at += len(tail) - OVERHEAD
        except InvalidTag:
            raise DamagedFile(f"block {first + k} does not authenticate", block=first + k) from None
        return at

    def seal_end(self, plain_size: int) -> bytes:
        """The end marker of a standalone file (FORMAT.md §7): its plaintext size, sealed."""
        nonce = os.urandom(NONCE)
        return nonce + self._gcm.encrypt(nonce, plain_size.to_bytes(8, "big"), self.file_id + END_INDEX)

    def open_end(self, marker: bytes, plain_size: int) -> None:
        try:
            size = int.from_bytes(self._gcm.decrypt(marker[:NONCE], marker[NONCE:], self.file_id + END_INDEX), "big")
        except InvalidTag:
            raise DamagedFile("the end marker does not authenticate (truncated or damaged)") from None
        if size != plain_size:
            raise DamagedFile(f"the file was cut: {plain_size} of {size} bytes are here")

    def open(self, first: int, ciphertext: bytes | memoryview, hole_limit: int = 0) -> bytes:
        """The plaintext of consecutive sealed blocks starting at block ``first`` (holes below
        ``hole_limit`` as in open_into)."""
        view = memoryview(ciphertext)
        if self._native is not None:
            whole, rest = divmod(len(view), CBLOCK)
            out_buf = bytearray(whole * BLOCK + max(0, rest - OVERHEAD))
            return bytes(out_buf[: self.open_into(first, view, memoryview(out_buf), hole_limit)])
        out = []
        fid, dec = self.file_id, self._gcm.decrypt
        for k, start in enumerate(range(0, len(view), CBLOCK)):
            chunk = view[start : start + CBLOCK]
            if len(chunk) <= OVERHEAD:
                raise DamagedFile(f"block {first + k} is truncated", block=first + k)
            if first + k < hole_limit and chunk == ZERO_CBLOCK:
                out.append(ZERO_BLOCK)
                continue
            try:
                out.append(dec(chunk[:NONCE], chunk[NONCE:], fid + (first + k).to_bytes(8, "big")))
            except InvalidTag:
                raise DamagedFile(f"block {first + k} does not authenticate", block=first + k) from None
        return b"".join(out)


def _is_short_tail(sealed_len: int, k: int) -> bool:
    """Whether block k of a run of sealed_len bytes is a tail too short to hold any plaintext."""
    whole, rest = divmod(sealed_len, CBLOCK)
    return k == whole and 0 < rest <= OVERHEAD
