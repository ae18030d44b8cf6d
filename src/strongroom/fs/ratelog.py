"""Log lines that repeat, rate-limited: a broken rules file or a caller that cannot be identified
is met on every request, and one line per request would flood the log and the disk."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

INTERVAL_S = 60.0
KEYS = 1024


class RateLimitedLog:
    """At most one line per key per ``interval`` seconds; the next one says how many were held."""

    def __init__(self, logger: logging.Logger, interval: float = INTERVAL_S, keys: int = KEYS) -> None:
        self._log = logger
        self._interval = interval
        self._keys = keys
        self._lock = threading.Lock()
        self._seen: OrderedDict[Any, list[float]] = OrderedDict()  # key -> [last logged, held since]

    def __call__(self, level: int, key: Any, msg: str, *args: Any, exc_info: Any = None) -> bool:
        """Log unless ``key`` was logged within the interval; True if it was logged."""
        now = time.monotonic()
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None and now - entry[0] < self._interval:
                entry[1] += 1
                return False
            held = int(entry[1]) if entry is not None else 0
            self._seen[key] = [now, 0]
            self._seen.move_to_end(key)
            while len(self._seen) > self._keys:
                self._seen.popitem(last=False)
        if held:
            msg += " (%d more like this held back)"
            args = (*args, held)
        self._log.log(level, msg, *args, exc_info=exc_info)
        return True
