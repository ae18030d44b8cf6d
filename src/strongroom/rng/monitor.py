"""A raw source under continuous test: only bytes that passed are handed out.

Every read goes through the SP 800-90B repetition count and adaptive proportion tests (cutoffs
from the source's min-entropy claim) and the FIPS 140-2 block tests, as rngtest runs them.
- A FIPS block that fails is dropped (about 1 in 1,250 blocks of perfect data fails by chance).
- A read with an SP 800-90B failure is dropped whole, and the source is taken out of use: those
  tests are built to fire about once in 2^20 windows of data that meets its claim.
- So is a source with more than MAX_FIPS_FAILURES failed blocks among its last FIPS_WINDOW.
A source out of use is retried after a backoff that doubles (1 s up to 5 min), with fresh tests,
and must pass again before its bytes are used; `status()` reports all of it.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strongroom.rng.fips import BLOCK_BYTES, FipsStream
from strongroom.rng.health import HealthTests
from strongroom.rng.sources import Source, SourceError

FIPS_WINDOW = 100
MAX_FIPS_FAILURES = 4  # P(5 or more of 100 | p = 0.0008) is about 3e-8
FIRST_BACKOFF, MAX_BACKOFF = 1.0, 300.0
CLEAN_READS_TO_FORGIVE = 25  # reads in a row that must pass before the backoff starts over


class SourceOutOfUse(Exception):
    """The source failed its health tests (or to deliver) and waits for its retry.  ``fresh``:
    this read found the failure (rather than finding the source still waiting)."""

    def __init__(self, message: str, fresh: bool) -> None:
        super().__init__(message)
        self.fresh = fresh


@dataclass
class Failure:
    at: float
    reason: str


class TestedSource:
    def __init__(self, source: Source, clock: Callable[[], float] = time.monotonic) -> None:
        if source.claim.min_entropy is None:
            raise ValueError(f"{source.name} is conditioned output, not a raw source to test")
        self.source = source
        self.name = source.name
        self._clock = clock
        self._read_bytes = max(1, source.read_size // BLOCK_BYTES) * BLOCK_BYTES  # whole FIPS blocks
        self._lock = threading.Lock()
        self._buffer = bytearray()
        self._recent: collections.deque[tuple[int, int]] = collections.deque()  # (blocks, failed) per read
        self.failures: list[Failure] = []
        self.retry_at: float | None = None
        self._backoff = FIRST_BACKOFF
        self.bytes_passed = 0
        self._new_tests()

    def _new_tests(self) -> None:
        assert self.source.claim.min_entropy is not None
        self.health = HealthTests(self.source.claim.min_entropy)
        self.fips = FipsStream()
        self._recent.clear()
        self._buffer.clear()
        self._clean_reads = 0

    @property
    def in_use(self) -> bool:
        return self.retry_at is None

    def read(self, n: int) -> bytes:
        """n bytes that passed every test, or SourceOutOfUse."""
        with self._lock:
            if self.retry_at is not None:
                if self._clock() < self.retry_at:
                    raise SourceOutOfUse(f"{self.name}: out of use for {self.retry_at - self._clock():.0f} s more", fresh=False)
                self._new_tests()  # a retry: the source must pass from scratch
                self.retry_at = None
            while len(self._buffer) < n:
                self._refill()
            out = bytes(self._buffer[:n])
            del self._buffer[:n]
            return out

    def _refill(self) -> None:
        try:
            raw = self.source.read(self._read_bytes)
        except SourceError as e:
            self._take_out(str(e))
        if not self.health.feed(raw):
            h = self.health
            self._take_out(f"SP 800-90B failure (repetition count {h.rct_failures}, adaptive proportion {h.apt_failures})")
        passed = self.fips.feed(raw)
        self._recent.append((self.fips.last_blocks, self.fips.last_failures))
        while sum(b for b, _ in self._recent) - self._recent[0][0] >= FIPS_WINDOW:
            self._recent.popleft()
        failed = sum(f for _, f in self._recent)
        if failed > MAX_FIPS_FAILURES:
            self._take_out(f"FIPS 140-2: {failed} of the last {sum(b for b, _ in self._recent)} blocks failed")
        for piece in passed:
            self._buffer += piece
            self.bytes_passed += len(piece)
        self._clean_reads += 1
        if self._clean_reads >= CLEAN_READS_TO_FORGIVE:
            self._backoff = FIRST_BACKOFF  # healthy for a while: the next failure starts over

    def _take_out(self, reason: str) -> None:
        now = self._clock()
        self.failures.append(Failure(now, reason))
        del self.failures[:-20]
        self.retry_at = now + self._backoff
        self._backoff = min(self._backoff * 2, MAX_BACKOFF)
        self._buffer.clear()
        raise SourceOutOfUse(f"{self.name}: {reason}; retry in {self.retry_at - now:.0f} s", fresh=True)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "source": self.name,
                "in_use": self.in_use,
                "retry_in_s": None if self.retry_at is None else max(0.0, round(self.retry_at - self._clock(), 1)),
                "min_entropy_claim": self.source.claim.min_entropy,
                "rct_cutoff": self.health.rct_limit,
                "apt_cutoff": self.health.apt_limit,
                "bytes_tested": self.health.samples,
                "bytes_passed": self.bytes_passed,
                "fips_blocks": self.fips.blocks,
                "fips_failures": self.fips.failures,
                "last_failure": self.failures[-1].reason if self.failures else None,
                "failures": len(self.failures),
            }
