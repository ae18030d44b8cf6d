"""The names of hard-linked files that the kernel holds, so a change made through one name reaches
the others at once.

libfuse's path-based API gives each name its own kernel inode: the kernel caches attributes
(size, link count, mode, times) and pages per name.  A change through one name (a write, chmod,
a new link, an unlink) updates that name's cache only, and another name would show the old state
until its cache times out.  So the daemon remembers, for every file with more than one link, the
plaintext names it has answered for (lookups, listings, links, renames), and after a change
through one of them asks the kernel to drop what it caches for the others.

The table is bounded: past LIMIT names the oldest file's names are forgotten, and for those the
kernel's cache times out as it did before (``--attr-timeout``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

Key = tuple[int, int]  # the lower file's (st_dev, st_ino)
LIMIT = 16384


class HardLinkNames:
    def __init__(self, limit: int = LIMIT) -> None:
        self._lock = threading.Lock()
        # file -> its names; read without the lock on the hot paths (a dict lookup is atomic)
        self.files: OrderedDict[Key, set[str]] = OrderedDict()
        self._names = self.files
        self._key_of: dict[str, Key] = {}
        self._limit = limit
        # path -> the file it names, if that file has several names: asked after every change,
        # so the dict's own get, without a Python frame around it
        self.key_of: Callable[[str], Key | None] = self._key_of.get

    def seen(self, key: Key, *paths: str) -> None:
        """The kernel now caches ``paths`` as names of the file ``key`` (which has several)."""
        with self._lock:
            names = self._names.get(key)
            if names is None:
                names = self._names[key] = set()
            for p in paths:
                old = self._key_of.get(p)
                if old is not None and old != key:
                    self._drop(old, p)
                names.add(p)
                self._key_of[p] = key
            self._names.move_to_end(key)
            while len(self._key_of) > self._limit and len(self._names) > 1:
                _, gone = self._names.popitem(last=False)
                for p in gone:
                    self._key_of.pop(p, None)

    def others(self, key: Key, *paths: str) -> list[str]:
        """The names of ``key`` other than ``paths``."""
        names = self._names.get(key)
        if not names:
            return []
        with self._lock:
            return [p for p in names if p not in paths]

    def removed(self, path: str) -> Key | None:
        """``path`` is no longer a name (unlinked, or replaced by a rename); returns its file."""
        if path not in self._key_of:
            return None
        with self._lock:
            key = self._key_of.get(path)
            if key is not None:
                self._drop(key, path)
            return key

    def renamed(self, old: str, new: str) -> None:
        """``old`` is now ``new``: a file's name, or a directory holding names."""
        if not self._key_of:
            return
        with self._lock:
            prefix = old.rstrip("/") + "/"
            moved = [p for p in self._key_of if p == old or p.startswith(prefix)]
            for p in moved:
                key = self._key_of.pop(p)
                names = self._names[key]
                names.discard(p)
                q = new + p[len(old) :]
                names.add(q)
                self._key_of[q] = key

    def _drop(self, key: Key, path: str) -> None:
        self._key_of.pop(path, None)
        names = self._names.get(key)
        if names is not None:
            names.discard(path)
            if not names:
                del self._names[key]
