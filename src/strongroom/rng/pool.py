"""The kernel's entropy pool: its state, and adding to it with the RNDADDENTROPY ioctl.

Since Linux 5.18 the pool is a BLAKE2s hash that is "full" (256 bits) once the CRNG is seeded:
entropy_avail stays at 256, nothing blocks, and credit only matters before the CRNG is first
seeded.  A feeder therefore waits for a low watermark on older kernels and follows a rate
schedule on newer ones (feeder.py); `accounting` says which applies here.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc/sys/kernel/random")
RNDADDENTROPY = 0x40085203  # _IOW('R', 0x03, int[2])
MAX_ADD = 1024  # bytes per ioctl: the kernel mixes any size, this keeps each credit small


class PoolError(Exception):
    """The pool cannot be written: not root, no such device, or the kernel refused."""


def kernel_version(release: str | None = None) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", release or os.uname().release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def accounting(release: str | None = None) -> bool:
    """True where the kernel still accounts entropy (before 5.18): feed below a watermark."""
    return kernel_version(release) < (5, 18)


@dataclass(frozen=True)
class PoolState:
    kernel: str
    entropy_avail: int
    poolsize: int
    write_wakeup_threshold: int | None
    accounting: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _read_int(name: str) -> int | None:
    try:
        return int((PROC / name).read_text())
    except (OSError, ValueError):
        return None


def state() -> PoolState:
    return PoolState(
        kernel=os.uname().release,
        entropy_avail=_read_int("entropy_avail") or 0,
        poolsize=_read_int("poolsize") or 0,
        write_wakeup_threshold=_read_int("write_wakeup_threshold"),
        accounting=accounting(),
    )


class PoolWriter:
    """An open random device to add (and credit) entropy to; root (CAP_SYS_ADMIN) only."""

    def __init__(self, device: str = "/dev/random") -> None:
        self.device = device
        try:
            self._fd = os.open(device, os.O_WRONLY | os.O_CLOEXEC)
        except PermissionError:
            raise PoolError(f"cannot open {device} for writing: run as root") from None
        except OSError as e:
            raise PoolError(f"cannot open {device}: {e.strerror}") from None

    def add(self, data: bytes, credit_bits: int) -> None:
        """Mix ``data`` into the pool and credit ``credit_bits`` (at most 8 per byte)."""
        for start in range(0, len(data), MAX_ADD):
            piece = data[start : start + MAX_ADD]
            bits = min(credit_bits, 8 * len(piece))
            credit_bits -= bits
            request = struct.pack("ii", bits, len(piece)) + piece
            try:
                fcntl.ioctl(self._fd, RNDADDENTROPY, request)
            except PermissionError:
                raise PoolError("the kernel refused RNDADDENTROPY: adding entropy needs CAP_SYS_ADMIN") from None
            except OSError as e:
                raise PoolError(f"RNDADDENTROPY on {self.device} failed: {e.strerror}") from None

    def close(self) -> None:
        os.close(self._fd)
