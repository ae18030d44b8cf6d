"""When the kernel may keep a file's plaintext pages: across opens, and across the changes the
mount made itself.

The mount writes through the kernel's page cache (no writeback cache), so the pages the kernel
holds for a name stay exact for as long as the lower file changes only through that name.  The
kernel's defaults assume otherwise: every open drops the file's pages, and so does every
attribute refresh that finds a new modification time (FUSE_CAP_AUTO_INVAL_DATA), which after
any write is every refresh.  A database reading pages its own writes had just cached read them
from the lower file again, decrypting each.

So the mount turns both off and does their job itself, knowing which changes were its own: it
remembers, per plaintext name, the lower file's identity, size and times it last reported to
the kernel (``seen``), and marks a name when it changed the file through it (``changed``).  A
later report that finds the file different without such a mark means the lower file changed
behind the mount's back (a sync tool, a restore): at an open the kernel drops the pages
(``keep`` is False), at an attribute refresh the notifier drops them, as the kernel's own rule
would have.  Changes through another name of a hard-linked file are dropped by links.py, and an
unmarked change is caught here too, when that table has forgotten the name.

Bounded: past LIMIT names the oldest are forgotten; an open of a forgotten name drops its pages
(nothing is known), an attribute refresh only records it.
"""

from __future__ import annotations

import os
import stat
from collections import OrderedDict
from collections.abc import Callable

LIMIT = 32768
Signature = tuple[int, int, int, int]  # st_ino, st_size, st_mtime_ns, st_ctime_ns (ctime: no one sets it by hand)
UNKNOWN: Signature = (-1, -1, -1, -1)  # nothing remembered (no file has it)


def _signature(st: os.stat_result) -> Signature:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class PageCache:
    def __init__(
        self, drop: Callable[[str], object], written: Callable[[os.stat_result], bool] = lambda st: False, limit: int = LIMIT
    ) -> None:
        self._drop = drop  # makes the kernel drop a name's pages, from a thread serving no request
        # whether the mount changed this open file without a call to changed (fastwrite.py)
        self._written = written
        self._limit = limit
        # name -> what was last reported for it; None: changed through the mount since
        self._seen: OrderedDict[str, Signature | None] = OrderedDict()

    def changed(self, *paths: str | None) -> None:
        """The mount changed the file (content or attributes) through these names."""
        seen = self._seen
        for p in paths:
            if p is not None and p in seen:
                seen[p] = None

    def keep(self, path: str, st: os.stat_result) -> bool:
        """At an open: whether the kernel may keep the pages it holds for ``path``."""
        if not stat.S_ISREG(st.st_mode):
            return False
        new = _signature(st)
        old = self._seen.get(path, UNKNOWN)
        self._remember(path, new)
        return old is None or old == new or (old is not UNKNOWN and self._written(st))

    def seen(self, path: str | None, st: os.stat_result) -> None:
        """Attributes of ``path`` go to the kernel: if the file changed behind the mount's back
        since the last report, its pages are dropped."""
        if path is None or not stat.S_ISREG(st.st_mode):
            return
        new = _signature(st)
        old = self._seen.get(path, UNKNOWN)
        if old == new:
            return
        self._remember(path, new)
        if old is not None and old is not UNKNOWN and not self._written(st):
            self._drop(path)

    def renamed(self, old: str, new: str) -> None:
        """The kernel's inode (and pages) for ``old`` now answers for ``new``; a directory's
        descendants are forgotten (their next open drops their pages)."""
        sig = self._seen.pop(old, UNKNOWN)
        self._seen.pop(new, None)
        if sig is not UNKNOWN:
            self._remember(new, sig)

    def removed(self, path: str) -> None:
        self._seen.pop(path, None)

    def _remember(self, path: str, sig: Signature | None) -> None:
        seen = self._seen
        seen[path] = sig
        if len(seen) > self._limit:
            try:
                seen.popitem(last=False)
            except KeyError:  # emptied by another thread meanwhile
                pass
