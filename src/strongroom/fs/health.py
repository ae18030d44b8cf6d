"""What a mount met that it did not expect, counted: damaged blocks and names, a directory's
tweak unreadable or missing, access rules refused, callers nobody can identify, failures no
operation expected.  Each kind is counted with its first and latest place, logged by whoever met
it (once per place, or rate-limited), and kept in a root-only file under /run/strongroom that
`strongroom fs status` reads, rewritten at most once a second while something new happens.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from strongroom import durable
from strongroom.fs.names import b64u

STATE_DIR = Path("/run/strongroom")
WRITE_EVERY_S = 1.0


def status_path(volume_id: bytes) -> Path:
    return STATE_DIR / f"fs-{b64u(volume_id)}.status.json"


@dataclass
class Seen:
    count: int
    first: str
    latest: str
    first_at: float
    latest_at: float


class Health:
    def __init__(self, volume_id: bytes | None = None, volume: str = "", mountpoint: str = "") -> None:
        self._path = status_path(volume_id) if volume_id is not None else None
        self._about = {"volume": volume, "mountpoint": mountpoint, "pid": os.getpid(), "since": time.time()}
        self._lock = threading.Lock()
        self.kinds: dict[str, Seen] = {}
        self._written = 0.0
        self._dirty = False
        self._scheduled = False

    def note(self, kind: str, where: str) -> None:
        """One more of ``kind`` (a short phrase), met at ``where`` (a path, never content)."""
        now = time.time()
        with self._lock:
            seen = self.kinds.get(kind)
            if seen is None:
                self.kinds[kind] = Seen(1, where, where, now, now)
            else:
                seen.count += 1
                seen.latest, seen.latest_at = where, now
            self._dirty = True
            wait = WRITE_EVERY_S - (time.monotonic() - self._written)
            if wait > 0:  # written a moment ago: once more when the second is over
                if not self._scheduled:
                    self._scheduled = True
                    timer = threading.Timer(wait, self.flush)
                    timer.daemon = True
                    timer.start()
                return
        self.flush()

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            return {**self._about, "problems": {k: asdict(v) for k, v in self.kinds.items()}}

    def flush(self) -> None:
        """Write the status file now (at start, and when something new was noted)."""
        if self._path is None:
            return
        body = json.dumps(self.snapshot(), indent=2).encode()
        with self._lock:
            self._written = time.monotonic()
            self._dirty = self._scheduled = False
        try:
            self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            durable.replace_file(self._path, body, 0o600)
        except OSError:
            pass  # a mount by a user who cannot write /run: the log still has every line

    def remove(self) -> None:
        if self._path is not None:
            try:
                self._path.unlink()
            except FileNotFoundError:
                pass
