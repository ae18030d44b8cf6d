"""Access-control denials sent to the key server's audit log, for volumes keyed by the server.

The mount's checks only append to an in-memory batch (no I/O on the request path); a background
thread sends the batch every few seconds, aggregated per program, directory and verdict with a
count.  While the server cannot be reached the batch is kept in a spool file (root-only, under
/run) and sent, spool first, once it answers again.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("strongroom.acl")

INTERVAL_S = 2.0
MAX_SPOOL_EVENTS = 100_000


class DenialReporter:
    def __init__(self, volume_id: str, client_factory: Callable[[], Any], spool: Path, interval: float = INTERVAL_S) -> None:
        self.volume_id = volume_id
        self._client_factory = client_factory
        self.spool = spool
        self.interval = interval
        self._pending: dict[tuple[str, str, int, str, bool, bool, str | None], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = -1
        self._failing = False
        self.sent = 0

    def add(
        self, program: str, sha256: str, uid: int, path_class: str, write: bool, enforced: bool, reason: str | None = None
    ) -> None:
        now = time.time()
        key = (program, sha256, uid, path_class, write, enforced, reason)
        with self._lock:
            e = self._pending.get(key)
            if e is None:
                self._pending[key] = {
                    "volume": self.volume_id,
                    "program": program,
                    "sha256": sha256,
                    "uid": uid,
                    "path_class": path_class,
                    "write": write,
                    "enforced": enforced,
                    "count": 1,
                    "first_at": now,
                    "last_at": now,
                }
                if reason is not None:  # the rules themselves were refused: every access is
                    self._pending[key]["reason"] = reason[:200]
            else:
                e["count"] += 1
                e["last_at"] = now
        self._ensure_thread()

    def _ensure_thread(self) -> None:
        if self._pid != os.getpid():  # the mount daemon may have forked after we were made
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="acl-report", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            self.flush()

    def flush(self) -> None:
        with self._lock:
            batch = list(self._pending.values())
            self._pending.clear()
        spooled = self._read_spool()
        events = spooled + batch
        if not events:
            return
        try:
            client = self._client_factory()
            try:
                for start in range(0, len(events), 500):
                    self.sent += client.report_acl_denials(events[start : start + 500])
            finally:
                client.close()
        except Exception as e:  # noqa: BLE001 - any failure: keep the events for the next try
            if not self._failing:
                log.warning("key server unreachable for denial reports (%s); keeping them in %s", type(e).__name__, self.spool)
            self._failing = True
            self._write_spool(events[-MAX_SPOOL_EVENTS:])
            return
        if self._failing:
            log.info("denial reports delivered again")
        self._failing = False
        if spooled:
            self.spool.unlink(missing_ok=True)

    def _read_spool(self) -> list[dict[str, Any]]:
        try:
            return [json.loads(line) for line in self.spool.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            return []

    def _write_spool(self, events: list[dict[str, Any]]) -> None:
        self.spool.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.spool.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, "".join(json.dumps(e) + "\n" for e in events).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.spool)
