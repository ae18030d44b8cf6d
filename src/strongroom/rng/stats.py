"""The statistics `ent` prints, in one streaming C pass (entstats.c) so testing never throttles a
source; the numpy version is the reference the tests hold it to.

Definitions follow ent's byte mode: Shannon entropy per byte; chi-square over 256 bins with its
upper-tail probability; arithmetic mean; Monte Carlo pi from successive 6-byte groups read as
two 24-bit big-endian coordinates (a trailing partial group is ignored); and the circular
serial correlation of successive bytes (the last byte pairs with the first).
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import asdict, dataclass

import numpy as np

from strongroom.rng import native


@dataclass(frozen=True)
class EntStats:
    bytes: int
    entropy: float  # bits per byte
    chi_square: float
    chi_square_p: float  # probability that a random source exceeds this chi-square
    mean: float
    monte_carlo_pi: float
    pi_error_percent: float
    serial_correlation: float

    def to_json(self) -> dict[str, float]:
        return asdict(self)


def _chi2_upper_tail(x: float, dof: int) -> float:
    """P(X > x) for a chi-square variable: the regularized upper incomplete gamma Q(dof/2, x/2)."""
    a, z = dof / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    if z < a + 1:  # series for the lower part, then complement
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= z / n
            total += term
            if term < total * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(-z + a * math.log(z) - math.lgamma(a)))
    # continued fraction (Lentz) for the upper part
    tiny = 1e-300
    b = z + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return min(1.0, math.exp(-z + a * math.log(z) - math.lgamma(a)) * h)


CHUNK = 1 << 22  # bytes per numpy pass: bounded memory, still vectorized


def _figures(n: int, counts: np.ndarray, serial_sum: int, inside: int, groups: int) -> EntStats:
    """ent's figures from its sums: byte counts, sum of successive products (circular), Monte Carlo."""
    counts = counts.astype(np.float64)
    p = counts / n
    nz = p[p > 0]
    entropy = float(-(nz * np.log2(nz)).sum()) + 0.0  # no "-0.0" for constant input
    expected = n / 256.0
    chi = float(((counts - expected) ** 2 / expected).sum())
    values = np.arange(256, dtype=np.float64)
    total = float((values * counts).sum())
    t2 = total * total
    t3 = float((values * values * counts).sum())
    denom = n * t3 - t2
    serial = -100000.0 if denom == 0 else (n * serial_sum - t2) / denom  # ent's "undefined" marker
    pi = 4.0 * inside / groups if groups else 0.0
    return EntStats(
        bytes=n,
        entropy=entropy,
        chi_square=chi,
        chi_square_p=_chi2_upper_tail(chi, 255),
        mean=total / n,
        monte_carlo_pi=pi,
        pi_error_percent=abs(pi - math.pi) / math.pi * 100 if groups else 100.0,
        serial_correlation=serial,
    )


class EntAccumulator:
    """ent's statistics over a stream, in one pass in C (libsrrng.so): `update` as data arrives,
    `result` at the end.  Memory stays constant however much is tested."""

    PIECE = 1 << 26  # the C side counts a piece in 32-bit counters

    def __init__(self) -> None:
        self._lib = native.require()
        self._state = native.EntState()
        self.bytes = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        for start in range(0, len(view), self.PIECE):
            piece = view[start : start + self.PIECE]
            if self._lib.sr_ent_update(ctypes.byref(self._state), native.address(piece), len(piece)) != 0:
                raise ValueError("the ent helper refused its state")
        self.bytes += len(view)

    def result(self) -> EntStats:
        if self.bytes == 0:
            raise ValueError("no data to test")
        st = self._state
        serial_sum = int(st.serial) + int(st.last) * int(st.first)  # circular: the last byte pairs with the first
        counts = np.ctypeslib.as_array(st.counts).copy()
        return _figures(self.bytes, counts, serial_sum, int(st.inside), int(st.groups))


def ent_stats(data: bytes | bytearray | memoryview, engine: str = "auto") -> EntStats:
    """ent's figures for ``data``; ``engine`` is "c" (libsrrng.so), "numpy", or "auto"."""
    if engine == "c" or (engine == "auto" and native.lib() is not None):
        acc = EntAccumulator()
        acc.update(data)
        return acc.result()
    return _ent_numpy(data)


def _ent_numpy(data: bytes | bytearray | memoryview) -> EntStats:
    buf = np.frombuffer(data, dtype=np.uint8)
    n = int(buf.size)
    if n == 0:
        raise ValueError("no data to test")
    counts = np.bincount(buf, minlength=256)
    groups = n // 6
    inside = 0
    radius2 = (256**3 - 1) ** 2
    step = CHUNK - CHUNK % 6
    for start in range(0, groups * 6, step):
        g = buf[start : min(start + step, groups * 6)].reshape(-1, 6).astype(np.int64)
        x = (g[:, 0] << 16) | (g[:, 1] << 8) | g[:, 2]
        y = (g[:, 3] << 16) | (g[:, 4] << 8) | g[:, 5]
        inside += int(np.count_nonzero(x * x + y * y <= radius2))
    t1 = 0
    for start in range(0, n - 1, CHUNK):
        a = buf[start : min(start + CHUNK + 1, n)].astype(np.int64)
        t1 += int(np.dot(a[:-1], a[1:]))
    t1 += int(buf[-1]) * int(buf[0])  # circular: the last byte pairs with the first
    return _figures(n, counts, t1, inside, groups)
