"""The rngd role: read health-tested sources and add their bytes to the kernel pool.

Only bytes that passed the source's continuous tests are added, and each is credited at the
source's min-entropy claim, never more.  On kernels that account entropy (before 5.18) the
feeder tops the pool up when it drops below a watermark; on newer kernels, where the pool reads
"full" once seeded, it adds a fixed amount on a schedule.  Both are rate limited.  Sources are
used in the order given; one that fails is skipped until its retry, and given up after
``give_up_after`` failures in a row.  When none is left the feeder stops with NoHealthySource.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strongroom.rng import pool
from strongroom.rng.monitor import SourceOutOfUse, TestedSource

log = logging.getLogger("strongroom.rng.feed")

DEFAULT_STATUS_FILE = Path("/run/strongroom/rng-feed.json")


class NoHealthySource(Exception):
    pass


@dataclass
class FeedPolicy:
    watermark: int  # bits; used where the kernel accounts entropy
    interval: float = 10.0  # seconds between checks (accounting) or additions (schedule)
    chunk: int = 64  # bytes per scheduled addition
    max_rate: int = 4096  # bytes per second, at most, averaged over an interval
    give_up_after: int = 5  # failures in a row before a source is dropped for good


class Feeder:
    def __init__(
        self,
        sources: list[TestedSource],
        writer: pool.PoolWriter,
        policy: FeedPolicy,
        status_file: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not sources:
            raise NoHealthySource("no source to feed from")
        self.sources = sources
        self.writer = writer
        self.policy = policy
        self.status_file = status_file
        self._clock = clock
        self._failures_in_row = {s.name: 0 for s in sources}
        self.given_up: dict[str, str] = {}
        self.bytes_added = 0
        self.bits_credited = 0
        self.started = time.time()
        self.stopping = threading.Event()

    def wanted(self) -> int:
        """Bytes to add now: up to the watermark where the kernel accounts, else the scheduled chunk."""
        cap = int(self.policy.max_rate * self.policy.interval)
        if not pool.accounting():
            return min(self.policy.chunk, cap)
        st = pool.state()
        if st.entropy_avail >= self.policy.watermark:
            return 0
        claim = max(s.source.claim.min_entropy or 0 for s in self.sources)
        return min(cap, max(1, -(-(st.poolsize - st.entropy_avail) // max(1, int(claim)))))

    def step(self) -> int:
        """One round: add what is wanted from the first healthy source; returns bytes added."""
        n = self.wanted()
        if n == 0:
            self._write_status()
            return 0
        for src in self.sources:
            if src.name in self.given_up:
                continue
            try:
                data = src.read(n)
            except SourceOutOfUse as e:
                if e.fresh:
                    self._failed(src, str(e))
                continue
            self._failures_in_row[src.name] = 0
            claim = src.source.claim.min_entropy or 0.0
            credit = int(len(data) * claim)
            self.writer.add(data, credit)
            self.bytes_added += len(data)
            self.bits_credited += credit
            log.debug("added %d bytes from %s, credited %d bits", len(data), src.name, credit)
            self._write_status()
            return len(data)
        self._write_status()
        if len(self.given_up) == len(self.sources):
            raise NoHealthySource("no healthy source remains: " + "; ".join(f"{k}: {v}" for k, v in self.given_up.items()))
        return 0

    def _failed(self, src: TestedSource, reason: str) -> None:
        self._failures_in_row[src.name] += 1
        log.warning("source failed: %s", reason)
        if self._failures_in_row[src.name] >= self.policy.give_up_after:
            self.given_up[src.name] = f"given up after {self.policy.give_up_after} failures in a row, last: {reason}"
            log.error("source %s %s", src.name, self.given_up[src.name])

    def run(self) -> None:
        """Feed until stop() (SIGTERM, SIGINT) or until no healthy source remains."""
        while not self.stopping.is_set():
            self.step()
            self.stopping.wait(self._pause())

    def _pause(self) -> float:
        retries = [s.retry_at for s in self.sources if s.retry_at is not None and s.name not in self.given_up]
        if retries and not any(s.in_use for s in self.sources if s.name not in self.given_up):
            return max(0.05, min(retries) - self._clock())  # nothing to read from before the next retry
        return self.policy.interval

    def stop(self) -> None:
        self.stopping.set()

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "started": self.started,
            "updated": time.time(),
            "device": self.writer.device,
            "mode": "watermark" if pool.accounting() else "schedule",
            "policy": self.policy.__dict__,
            "bytes_added": self.bytes_added,
            "bits_credited": self.bits_credited,
            "sources": [dict(s.status(), given_up=self.given_up.get(s.name)) for s in self.sources],
        }

    def _write_status(self) -> None:
        if self.status_file is None:
            return
        try:
            self.status_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.status_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.status()))
            os.replace(tmp, self.status_file)
        except OSError as e:
            log.warning("cannot write %s: %s", self.status_file, e.strerror)


def read_status(path: Path = DEFAULT_STATUS_FILE) -> dict[str, Any] | None:
    """The running feeder's last status, if its process is alive."""
    try:
        st: dict[str, Any] = json.loads(path.read_text())
        os.kill(int(st["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return st
