"""The audit chain head mirrored in the data dir, so truncating the log in the database shows."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class HeadFile:
    """The chain head mirrored in the data dir: 'seq mac_hex', only ever moved forward."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> tuple[int, bytes] | None:
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return None
        if not text:
            return None
        seq, mac = text.split()
        return int(seq), bytes.fromhex(mac)

    def advance(self, seq: int, mac: bytes, force: bool = False) -> None:
        """Move the mirrored head forward (never back unless ``force``), durably."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            current = os.read(fd, 200).decode().split()
            if not force and current and int(current[0]) >= seq:
                return
            data = f"{seq} {mac.hex()}\n".encode().ljust(80)
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            # Durable before the batch is acknowledged, like its commit: a mirror lost to a crash
            # would let the log be cut back to it unnoticed.
            os.fdatasync(fd)
        finally:
            os.close(fd)
