"""Plaintext paths to lower ones (FORMAT.md §6): each component's encrypted name under its
directory's tweak, the tweak stored in the directory or derived from its parent's.

A path resolves through two caches: known directories (plaintext path -> lower path and tweak)
and encrypted names ((tweak, plain name) -> lower name: a pure function of the two, so never
stale).  The same pairs read backwards ((tweak, encrypted name) -> plain name) spare a listing
the decryption of names the daemon has made or listed before: a lower name that was changed is
another key, and decrypts (or fails) as it would have.  Only a directory's own entry can go
stale: rmdir drops that one, a directory rename drops them all.  (A cache of whole paths had
to be cleared at every rmdir, after which each request re-read the tweak of every directory on
its path, most of rm -rf's time.)
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from strongroom.fs import names, sidecar
from strongroom.fs.beneath import Beneath

_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
CACHE_ENTRIES = 4096  # bound on cached directories (with their tweaks); names get 4x as many


class Lru(OrderedDict[Any, Any]):
    def __init__(self, limit: int = CACHE_ENTRIES) -> None:
        super().__init__()
        self.limit = limit

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


def _eio() -> OSError:
    return OSError(errno.EIO, os.strerror(errno.EIO))


class Resolver:
    """``damage(what, block, reason)`` is told of a damaged stored tweak before EIO is raised."""

    def __init__(
        self,
        root: str,
        cipher: names.NameCipher,
        tweaks: names.Tweaks,
        damage: Callable[[str, int | None, str], None],
        beneath: Beneath,
    ) -> None:
        self.root = root
        self.beneath = beneath  # reaches directories deeper than one path can name
        self.cipher = cipher
        self.tweaks = tweaks
        self._damage = damage
        self._lock = threading.Lock()
        self._dirs = Lru()
        self._dirs_gen = 0  # bumped whenever a directory entry is dropped
        self._names = Lru(4 * CACHE_ENTRIES)
        self._plain = Lru(4 * CACHE_ENTRIES)

    def stored_diriv(self, lower_dir: str) -> bytes | None:
        """What a directory's ``strongroom.diriv`` holds, None if it stores none."""
        try:
            return self.beneath.call(f"{lower_dir}/{names.DIRIV}", sidecar.read_bounded, self.tweaks.stored_max)  # type: ignore[no-any-return]
        except sidecar.UnsafeFile as e:  # a symlink, FIFO, device, oversized: that directory alone is EIO
            self._damage(lower_dir, None, f"directory tweak unreadable ({e.strerror})")
            raise _eio() from None

    def dir(self, path: str) -> tuple[str, bytes]:
        """(lower path, tweak) of a plaintext directory: its stored tweak if it has one (the root,
        a directory that was moved, every directory of a version-1 volume), else the one derived
        from its parent's tweak and its lower name.  From the nearest directory known, one level
        at a time (never recursion: a tree may be of any depth)."""
        hit = self._dirs.get(path)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        gen = self._dirs_gen
        below: list[str] = []
        while path not in ("/", ""):
            below.append(path)
            path = path.rpartition("/")[0]
            hit = self._dirs.get(path or "/")
            if hit is not None:
                break
        else:
            hit = self._tweak("/", self.root, None, "", gen)
        for path in reversed(below):
            lower_parent, parent_iv = hit
            name = self._lower_name(parent_iv, path.rpartition("/")[2])[0]
            hit = self._tweak(path, f"{lower_parent}/{name}", parent_iv, name, gen)  # the root is never "/" (VolumeOps)
        return hit  # type: ignore[no-any-return]

    def _tweak(self, path: str, lower: str, parent_iv: bytes | None, name: str, gen: int) -> tuple[str, bytes]:
        iv = self.tweak(lower, parent_iv, name)
        with self._lock:
            if gen == self._dirs_gen:  # no rmdir or rename since the tweak was read
                self._dirs.put(path, (lower, iv))
        return lower, iv

    def tweak(self, lower: str, parent_iv: bytes | None, name: str) -> bytes:
        """The tweak of the lower directory ``lower``, entry ``name`` of the directory with tweak
        ``parent_iv`` (None: the root); EIO (and damage told) when it may not be read."""
        raw = self.stored_diriv(lower)
        if raw is not None:
            try:
                iv = self.tweaks.read(raw, parent_iv, name)
            except names.BadName as e:
                self._damage(lower, None, str(e))
                raise _eio() from None
        elif parent_iv is None or not self.tweaks.derived:  # the root's, or a version-1 volume's
            self._damage(lower, None, "directory tweak missing: no name in it can be read")
            raise _eio()
        else:
            iv = self.tweaks.derive(parent_iv, name)
        return iv

    def entry(self, path: str) -> tuple[str, str, str | None]:
        """(lower parent dir, lower entry name, full encrypted name if long) of a plaintext path."""
        lower_parent, _, name, full = self.locate(path)
        return lower_parent, name, full

    def locate(self, path: str) -> tuple[str, bytes, str, str | None]:
        """(lower parent dir, its tweak, lower entry name, full encrypted name if long)."""
        parent, _, leaf = path.rstrip("/").rpartition("/")
        lower_parent, iv = self.dir(parent or "/")
        name, full = self._lower_name(iv, leaf)
        return lower_parent, iv, name, full

    def _lower_name(self, iv: bytes, leaf: str) -> tuple[str, str | None]:
        key = (iv, leaf)
        hit = self._names.get(key)
        if hit is None:
            raw = leaf.encode(_FS_ENCODING, _FS_ERRORS)  # os.fsencode, without its frame
            try:
                hit = self.cipher.lower_name(raw, iv)
            except names.BadName:
                code = errno.ENAMETOOLONG if len(raw) > 255 else errno.EINVAL
                raise OSError(code, os.strerror(code)) from None
            with self._lock:
                self._names.put(key, hit)
                self._plain.put((iv, hit[1] or hit[0]), raw)
        return hit  # type: ignore[no-any-return]

    def plain(self, encrypted: str, iv: bytes, long: bool = False) -> bytes:
        """The plain name of a full encrypted name in the directory with tweak ``iv``, read from
        a long-name sidecar if ``long`` (names.BadName if it does not decrypt there, or is not
        the name's one spelling)."""
        self.cipher.check_form(encrypted, long)
        key = (iv, encrypted)
        hit = self._plain.get(key)
        if hit is None:
            hit = self.cipher.decrypt(encrypted, iv)
            with self._lock:
                self._plain.put(key, hit)
        return hit  # type: ignore[no-any-return]

    def lower(self, path: str) -> str:
        """The lower path of a plaintext path."""
        if path in ("/", ""):
            return self.root
        hit = self._dirs.get(path)
        if hit is not None:
            return str(hit[0])
        lower_parent, _, name, _ = self.locate(path)
        return f"{lower_parent}/{name}"

    def remember_dir(self, path: str, lower: str, iv: bytes) -> None:
        """A directory just made: its lower path and tweak."""
        with self._lock:
            self._dirs.put(path, (lower, iv))

    def forget(self, path: str | None = None) -> None:
        """Drop a directory's cached lower path and tweak (all directories' if ``path`` is None)."""
        with self._lock:
            self._dirs_gen += 1
            if path is None:
                self._dirs.clear()
            else:
                self._dirs.pop(path, None)
