"""libfuse's hidden names: the daemon's descriptors of files unlinked, or renamed over, while open.

libfuse's path-based API moves a file that is unlinked (or renamed over) while open to a name of
its own (`.fuse_hidden…`, fuse.c's hidden_name) so it can still address it by path, and unlinks
that name at the last close.  The daemon serves such a name from a descriptor instead of a lower
entry: an unlinked file leaves its lower directory at once, as on ext4, and a file renamed over
stays where it is until the rename replaces it in one lower rename(2), so the name is never
missing in between (VolumeOps._hide decides which).

After libfuse's last close of a file that was renamed over, its descriptor stays LINGER_S more:
a program whose path walk reached that file through the kernel's cached name just before the
rename then opens or stats it, as on ext4, instead of finding it gone.  Past that, such a request
gets ESTALE, on which the kernel walks the path again and finds what the name holds now.

A descriptor is never closed while in use: a request working on it holds it (use), and a file
opened through the name holds it until that open's release (opened/closed), since the kernel
then stats it by that name (fstat sends GETATTR by path) for as long as it is open.  Its
moment to linger starts again at that release.  So a descriptor number is never reused under a
request that still holds it, and an open file's fstat never answers ESTALE.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
import time
from collections.abc import Iterator

from strongroom.fs.beneath import Beneath
from strongroom.fs.fileio import FileIO

LINGER_S, LINGER_MAX = 1.0, 256
_NAME_CHANGES = (10, 12, 45)  # FUSE_UNLINK, FUSE_RENAME, FUSE_RENAME2: libfuse hides open files within these
_NAME = re.compile(r"\.fuse_hidden[0-9a-f]{16}")


def is_hidden_name(path: str) -> bool:
    return _NAME.fullmatch(path.rpartition("/")[2]) is not None


class HiddenFiles:
    def __init__(self) -> None:
        # hidden name -> the daemon's descriptor; read without the lock on the hot paths (a dict
        # lookup is atomic), usually empty
        self.fds: dict[str, int] = {}
        self._renamed_over: dict[str, None] = {}  # names a rename made (not an unlink)
        self._lingering: dict[str, float] = {}  # released by libfuse -> when it may be closed
        self._users: dict[str, int] = {}  # name -> requests using it now + files opened through it
        self.opened_through: dict[int, str] = {}  # open file handle -> the hidden name it was opened by
        self._lock = threading.Lock()
        self._reaping = False

    def hide(self, lower: str, hidden: str, renaming: bool, io: FileIO, beneath: Beneath) -> str | None:
        """libfuse moving the open file ``lower`` to ``hidden``: keep a descriptor of it to serve
        that name.  Within a rename ("keep"), the lower entry stays: libfuse renames the rename's
        source over it next, in the same request, and that one lower rename replaces it, where
        removing it here would leave the name missing in between (ENOENT for an editor's or a
        package manager's readers); libfuse may count an open the daemon just released, which
        then gets a descriptor of its own.  Within an unlink ("unlink"), the caller removes the
        lower entry at once.  None if the daemon has no such open file."""
        try:
            st = beneath.call(lower, os.lstat)
        except FileNotFoundError:
            return None
        fd = io.descriptor_of((st.st_dev, st.st_ino))
        if renaming:
            self.keep(hidden, beneath.open(lower, os.O_RDONLY | os.O_CLOEXEC) if fd is None else fd, renamed_over=True)
            return "keep"
        if fd is None:
            return None
        self.keep(hidden, fd, renamed_over=False)
        return "unlink"

    def keep(self, hidden: str, fd: int, renamed_over: bool) -> None:
        with self._lock:
            self.fds[hidden] = fd
            if renamed_over:
                self._renamed_over[hidden] = None

    @contextlib.contextmanager
    def use(self, path: str) -> Iterator[int | None]:
        """The descriptor serving ``path`` (None if it is no name held here), kept open for the
        block's length."""
        with self._lock:
            fd = self.fds.get(path)
            if fd is not None:
                self._users[path] = self._users.get(path, 0) + 1
        try:
            yield fd
        finally:
            if fd is not None:
                with self._lock:
                    self._unuse(path)

    def opened(self, path: str, fh: int) -> None:
        """``fh`` was opened through the held name ``path`` (within ``use(path)``): keep it until
        ``closed(fh)``."""
        with self._lock:
            self._users[path] = self._users.get(path, 0) + 1
            self.opened_through[fh] = path

    def closed(self, fh: int) -> None:
        with self._lock:
            path = self.opened_through.pop(fh, None)
            if path is not None:
                self._unuse(path)

    def _unuse(self, path: str) -> None:
        left = self._users[path] - 1
        if left:
            self._users[path] = left
            return
        del self._users[path]
        if path not in self._lingering:  # libfuse still holds the name: nothing to close yet
            return
        if self._lingering[path]:  # a renamed-over file just closed: another moment for walks begun before
            self._lingering[path] = time.monotonic() + LINGER_S
        self._expire()

    def release(self, hidden: str) -> bool:
        """libfuse's unlink of a hidden name at the file's last close: True if it was one."""
        with self._lock:
            if hidden not in self.fds or hidden in self._lingering:
                return hidden in self.fds
            # a renamed-over file lingers; an unlinked one goes as soon as no request holds it
            renamed_over = self._renamed_over.pop(hidden, "unlinked") is None
            self._lingering[hidden] = time.monotonic() + LINGER_S if renamed_over else 0.0
            if renamed_over and not self._reaping:  # the file's space is freed once the moment has passed
                self._reaping = True
                threading.Thread(target=self._reap, name="strongroom-hidden", daemon=True).start()
            self._expire()
        return True

    def _reap(self) -> None:
        while True:
            time.sleep(LINGER_S)
            with self._lock:
                self._expire()
                if not self._lingering:
                    self._reaping = False
                    return

    def _expire(self) -> None:
        """Close what libfuse let go of, no request holds and has lingered long enough (the
        oldest first past LINGER_MAX); under the lock."""
        if not self._lingering:
            return
        now = time.monotonic()
        crowded = len(self._lingering) - LINGER_MAX
        for name, until in sorted(self._lingering.items(), key=lambda item: item[1]):
            if name in self._users or (until > now and crowded <= 0):
                continue
            crowded -= 1
            del self._lingering[name]
            os.close(self.fds.pop(name))

    def missing_errno(self, path: str, serving: int) -> int:
        """The errno for ``path`` when its lower entry is missing, within a request of opcode
        ``serving`` (0: unknown).  ESTALE for a hidden name the daemon has let go of: a caller
        reaches it only through a name the kernel cached from before a rename, and on ESTALE the
        kernel walks the path again, revalidating, and finds what the name holds now, where
        ENOENT would fail a program racing an atomic replace.  ENOENT otherwise, and for
        libfuse's own probe for a free hidden name (within a rename or an unlink)."""
        if serving and serving not in _NAME_CHANGES and is_hidden_name(path) and path not in self.fds:
            return errno.ESTALE
        return errno.ENOENT
