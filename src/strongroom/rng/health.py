"""Continuous health tests of NIST SP 800-90B §4.4 for raw noise sources, vectorized with numpy.

Samples are bytes.  Each source states a min-entropy claim H (bits per byte); cutoffs follow the
standard with a false-positive probability alpha = 2^-20 per test:
- Repetition Count Test: fail when one value repeats C = 1 + ceil(20 / H) times in a row;
- Adaptive Proportion Test: in each window of W = 512 samples, fail when the window's first value
  occurs C = 1 + CRITBINOM(W, 2^-H, 1 - alpha) times or more.
State carries across calls, so a source can be tested as it is read.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from strongroom.rng import native

ALPHA_LOG2 = 20  # alpha = 2^-20
APT_WINDOW = 512


def rct_cutoff(h: float) -> int:
    if not 0 < h <= 8:
        raise ValueError("min-entropy per byte must be in (0, 8]")
    return 1 + math.ceil(ALPHA_LOG2 / h)


def apt_cutoff(h: float, window: int = APT_WINDOW) -> int:
    """1 + the smallest k with P(Binomial(window, 2^-h) <= k) >= 1 - 2^-20."""
    if not 0 < h <= 8:
        raise ValueError("min-entropy per byte must be in (0, 8]")
    p = 2.0**-h
    target = 1.0 - 2.0**-ALPHA_LOG2
    cdf = 0.0
    log_p, log_q = math.log(p), math.log1p(-p) if p < 1 else float("-inf")
    for k in range(window + 1):
        log_term = math.lgamma(window + 1) - math.lgamma(k + 1) - math.lgamma(window - k + 1) + k * log_p + (window - k) * log_q
        cdf += math.exp(log_term)
        if cdf >= target:
            return 1 + k
    return window


class HealthTests:
    """RCT and APT over a stream of byte samples from one source; in C (healthtests.c) when
    libsrrng.so is built, else numpy (the reference, ``engine="numpy"``)."""

    def __init__(self, min_entropy: float, engine: str = "auto") -> None:
        self.min_entropy = min_entropy
        self.rct_limit = rct_cutoff(min_entropy)
        self.apt_limit = apt_cutoff(min_entropy)
        self.samples = 0
        self._lib = native.require() if engine == "c" else native.lib() if engine == "auto" else None
        self._state = native.HealthState(rct_limit=self.rct_limit, apt_limit=self.apt_limit, apt_window=APT_WINDOW)
        self._last, self._run, self._pending = -1, 0, b""  # the numpy engine's state
        self._rct_numpy = self._apt_numpy = 0

    @property
    def rct_failures(self) -> int:
        return int(self._state.rct_failures) + self._rct_numpy

    @property
    def apt_failures(self) -> int:
        return int(self._state.apt_failures) + self._apt_numpy

    @property
    def healthy(self) -> bool:
        return self.rct_failures == 0 and self.apt_failures == 0

    def feed(self, data: bytes | bytearray | memoryview) -> bool:
        """Test more samples; returns False if this call saw a failure."""
        before = self.rct_failures + self.apt_failures
        n = len(memoryview(data).cast("B"))
        if n:
            self.samples += n
            if self._lib is not None:
                if self._lib.sr_health_update(ctypes.byref(self._state), native.address(data), n) != 0:
                    raise ValueError("the health-test helper refused its state")
            else:
                x = np.frombuffer(data, dtype=np.uint8)
                self._repetition(x)
                self._proportion(bytes(data))
        return self.rct_failures + self.apt_failures == before

    def _repetition(self, x: np.ndarray) -> None:
        starts = np.flatnonzero(np.diff(x.astype(np.int16)) != 0) + 1  # where a new value begins
        bounds = np.concatenate([[0], starts, [x.size]])
        lengths = np.diff(bounds)
        if int(x[0]) == self._last:
            lengths[0] += self._run  # the run carried over from the previous call
        self._rct_numpy += int(np.count_nonzero(lengths >= self.rct_limit))
        self._last, self._run = int(x[-1]), int(lengths[-1])

    def _proportion(self, data: bytes) -> None:
        buf = self._pending + data
        whole = len(buf) // APT_WINDOW
        if whole:
            w = np.frombuffer(buf[: whole * APT_WINDOW], dtype=np.uint8).reshape(whole, APT_WINDOW)
            counts = (w == w[:, :1]).sum(axis=1)  # the first sample counts itself, as in §4.4.2
            self._apt_numpy += int(np.count_nonzero(counts >= self.apt_limit))
        self._pending = buf[whole * APT_WINDOW :]
