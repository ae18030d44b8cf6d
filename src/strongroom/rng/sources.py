"""Where randomness comes from: getrandom(2), RDRAND, RDSEED, /dev/hwrng and a Strongroom server.

Keys are always generated from getrandom (the OS CSPRNG); the other sources feed the kernel pool
(`strongroom rng feed`) or are mixed into the server's entropy service, never replace it.  Each
raw source states a min-entropy claim in bits per byte; its SP 800-90B cutoffs come from that
claim (see health.py and docs/OPERATIONS.md for why each claim is what it is).  getrandom has no
claim: it is the kernel's conditioned output, and testing it would test ChaCha20.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from strongroom.rng import native

DEFAULT_HWRNG = "/dev/hwrng"
REMOTE_PIECE = 65536  # the server's largest entropy answer


class SourceUnavailable(Exception):
    """The source does not exist here (CPU, device, build, permissions, profile)."""


class SourceError(Exception):
    """The source exists but failed to deliver."""


@dataclass(frozen=True)
class Claim:
    """What a source is, and the min-entropy per byte its health tests assume."""

    name: str
    kind: str
    min_entropy: float | None  # bits per byte; None: conditioned by the kernel, not health-tested
    why: str


CLAIMS = {
    "getrandom": Claim("getrandom", "kernel CSPRNG", None, "the kernel's ChaCha20 output: what every key is drawn from"),
    "rdrand": Claim(
        "rdrand",
        "CPU DRBG output",
        4.0,
        "AES-CTR DRBG output, reseeded by the CPU's conditioner: its true entropy cannot be measured at the "
        "output, so the claim is a floor that keeps false alarms below one per terabyte while catching stuck, "
        "constant (AMD's all-ones RDRAND, 2019; zero RDSEED on Zen 5, 2025) and biased output",
    ),
    "rdseed": Claim("rdseed", "CPU conditioned seed", 4.0, "conditioned full-entropy seeds by design; same floor as rdrand"),
    "hwrng": Claim(
        "hwrng",
        "hardware RNG device",
        2.0,
        "whatever device the kernel exposes (virtio-rng relaying the host, a TPM, a chipset noise source), some "
        "of them raw: SP 800-90B's own example claim of 2 bits per byte",
    ),
    "remote": Claim(
        "remote",
        "Strongroom server",
        4.0,
        "the server's getrandom over authenticated TLS: tested like rdrand, for transport faults",
    ),
}


class Source(Protocol):
    name: str
    claim: Claim
    read_size: int  # bytes per read that suit the source when reading ahead for tests

    def read(self, n: int) -> bytes | bytearray:
        """Exactly n bytes, or SourceError."""
        ...

    def close(self) -> None: ...


class Getrandom:
    name = "getrandom"
    claim = CLAIMS["getrandom"]
    read_size = 1 << 20

    def read(self, n: int) -> bytes:
        return os.urandom(n)  # getrandom(2), looping until n bytes are read

    def close(self) -> None:
        pass


def kernel_cpu_flags(wanted: str) -> set[str]:
    """The CPU flags Linux lists for the first CPU; ``{wanted}`` where there is no /proc/cpuinfo
    to ask (another kernel: CPUID alone decides there)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {wanted}
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return {wanted}


class _CpuSource:
    """RDRAND or RDSEED through libsrrng.so (cpurng.c).  Small reads are served from a 4 KiB
    buffer (a ctypes call costs more than the instruction); the buffer is dropped in a forked
    child, so parent and child never hand out the same bytes."""

    BUFFER = 4096

    def __init__(self, name: str) -> None:
        self.name = name
        self.claim = CLAIMS[name]
        self.read_size = 100_000 if name == "rdrand" else 10_000  # RDSEED runs at ~10 MB/s
        so = native.lib()
        if so is None:
            raise SourceUnavailable(f"{name}: {native.LIBRARY.name} is not built (run scripts/install.sh)")
        if not getattr(so, f"sr_cpu_has_{name}")():
            raise SourceUnavailable(f"{name}: not available on this CPU")
        if name not in kernel_cpu_flags(name):
            # CPUID still offers the instruction when the kernel has turned it off for an
            # erratum (Zen 5's RDSEED returning zeros, 2025) or the hypervisor hides it: follow
            # the kernel, which knows the erratum list.
            raise SourceUnavailable(f"{name}: not available on this CPU (the kernel has it switched off)")
        self._fill = getattr(so, f"sr_{name}_fill")
        self._spare = bytearray(self.BUFFER)
        self._pinned = (ctypes.c_char * self.BUFFER).from_buffer(self._spare)  # a fixed address
        self._spare_addr = ctypes.addressof(self._pinned)
        self._view = memoryview(self._spare)
        self._spare_at = self.BUFFER  # bytes of the buffer already handed out
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._spare_at = self.BUFFER
        self._lock = threading.Lock()

    def read(self, n: int) -> bytes | bytearray:
        if n <= self.BUFFER // 4:
            with self._lock:
                if self.BUFFER - self._spare_at < n:
                    self._spare_at = 0
                    if self._fill(self._spare_addr, self.BUFFER) != self.BUFFER:
                        self._spare_at = self.BUFFER
                        raise SourceError(f"{self.name}: the instruction kept failing (carry flag clear)")
                at = self._spare_at
                self._spare_at += n
                return self._view[at : at + n].tobytes()  # each byte handed out once
        buf = bytearray(n)  # handed out as is: a copy into bytes costs a third of RDRAND's speed
        if n and self._fill(native.address(buf), n) != n:
            raise SourceError(f"{self.name}: the instruction kept failing (carry flag clear)")
        return buf

    def close(self) -> None:
        pass


class Hwrng:
    """A character device such as /dev/hwrng (root only on Debian), or any file or pipe."""

    name = "hwrng"
    claim = CLAIMS["hwrng"]
    read_size = 5_000  # virtual machines often rate-limit virtio-rng to ~10 kB/s

    def __init__(self, path: str = DEFAULT_HWRNG) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise SourceUnavailable(f"hwrng: no {path} on this machine") from None
        except PermissionError:
            raise SourceUnavailable(f"hwrng: permission denied on {path} (root only)") from None
        except OSError as e:
            raise SourceUnavailable(f"hwrng: cannot open {path}: {e.strerror}") from None

    @property
    def device(self) -> str:
        """The kernel's current hwrng driver, when the path is the kernel's device."""
        current = Path("/sys/class/misc/hw_random/rng_current")
        if self.path == DEFAULT_HWRNG and current.exists():
            return current.read_text().strip()
        return self.path

    def read(self, n: int) -> bytes:
        parts, have = [], 0
        while have < n:
            try:
                chunk = os.read(self._fd, n - have)
            except OSError as e:
                raise SourceError(f"hwrng: reading {self.path}: {e.strerror}") from None
            if not chunk:
                raise SourceError(f"hwrng: {self.path} ended")
            parts.append(chunk)
            have += len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        os.close(self._fd)


class Remote:
    """The entropy service of the Strongroom server named in a client profile."""

    name = "remote"
    claim = CLAIMS["remote"]
    read_size = REMOTE_PIECE

    def __init__(self, profile: str | os.PathLike[str] | None = None) -> None:
        from strongroom.client import Client, StrongroomError

        self._error = StrongroomError
        try:
            self._client = Client.from_profile(profile)
        except StrongroomError as e:
            raise SourceUnavailable(f"remote: {e}") from None

    def read(self, n: int) -> bytes:
        parts, have = [], 0
        try:
            while have < n:
                chunk = self._client.entropy(min(REMOTE_PIECE, n - have))
                parts.append(chunk)
                have += len(chunk)
        except self._error as e:
            raise SourceError(f"remote: {e}") from None
        return b"".join(parts)

    def close(self) -> None:
        self._client.close()


NAMES = ("getrandom", "rdrand", "rdseed", "hwrng", "remote")


def open_source(spec: str, profile: str | os.PathLike[str] | None = None) -> Source:
    """A source by name; ``hwrng:PATH`` reads another device, file or pipe."""
    name, _, arg = spec.partition(":")
    if name == "getrandom" and not arg:
        return Getrandom()
    if name in ("rdrand", "rdseed") and not arg:
        return _CpuSource(name)
    if name == "hwrng":
        return Hwrng(arg or DEFAULT_HWRNG)
    if name == "remote" and not arg:
        return Remote(profile)
    raise SourceUnavailable(f"unknown source {spec!r} (choose from {', '.join(NAMES)}, or hwrng:PATH)")
