"""Standalone encrypted files (docs/FORMAT.md §7): a key envelope, then a file of §5.

Streaming in 1 MiB pieces both ways, so any size fits in constant memory.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from strongroom.fs import content
from strongroom.fs.config import ConfigError, kek_aad, passphrase_source, passphrase_source_key
from strongroom.fs.keys import WrongKey, open_sealed
from strongroom.fs.names import b64u, unb64u

MAGIC = b"SRE1"
PIECE = 256 * content.BLOCK  # plaintext per read: 1 MiB
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


def encrypt_stream(src: IO[bytes], dst: IO[bytes], volume_id: bytes, kek: bytes, key_source: dict[str, Any] | None) -> int:
    """Write src encrypted to dst; returns the plaintext size."""
    dst.write(Envelope(volume_id, key_source).encode())
    header = content.FileHeader.fresh()
    dst.write(header.encode(kek, volume_id))
    cipher = content.FileCipher(header)
    total, index = 0, 0
    while piece := _read_full(src, PIECE):
        dst.write(cipher.seal(index, piece))
        total += len(piece)
        index += len(piece) // content.BLOCK
        if len(piece) < PIECE:
            break
    dst.write(cipher.seal_end(total))
    return total


def encrypt_with_passphrase(src: IO[bytes], dst: IO[bytes], passphrase: str) -> int:
    volume_id, kek = os.urandom(16), os.urandom(32)
    return encrypt_stream(src, dst, volume_id, kek, passphrase_source(kek, volume_id, passphrase))


def decrypt_stream(src: IO[bytes], dst: IO[bytes], kek_for: Callable[[Envelope], bytes]) -> int:
    """Write src's plaintext to dst; ``kek_for`` turns the envelope into the KEK (or raises).
    content.DamagedFile on any block that fails authentication and on a cut file."""
    env = read_envelope(src)
    kek = kek_for(env)
    header = content.FileHeader.decode(_read_full(src, content.HEADER), kek, env.volume_id)
    cipher = content.FileCipher(header)
    total, index, pending = 0, 0, b""
    step = 256 * content.CBLOCK
    while True:
        chunk = _read_full(src, step)
        pending += chunk
        if len(chunk) == step:  # more may follow: open whole blocks, keep room for the end marker
            usable = (len(pending) - content.END_MARKER) // content.CBLOCK * content.CBLOCK
        else:
            if len(pending) < content.END_MARKER:
                raise content.DamagedFile("the file was cut (no end marker)", block=index)
            usable = len(pending) - content.END_MARKER
        if usable > 0:
            plain = cipher.open(index, memoryview(pending)[:usable])
            dst.write(plain)
            total += len(plain)
            index += -(-usable // content.CBLOCK)
            pending = pending[usable:]
        if len(chunk) < step:
            cipher.open_end(pending, total)
            return total


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
