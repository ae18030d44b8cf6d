"""Checking a volume offline (`strongroom fs fsck`): every config, header, block, name, symlink
target and attribute is opened with the volume's keys; each failure is reported with where it is.
Nothing is changed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from strongroom.fs import content, journal, names, reencrypt, sidecar, xattrs
from strongroom.fs.config import CONFIG
from strongroom.fs.keys import FILE, SYMLINK, VolumeKeys
from strongroom.fs.lowerwalk import Tree
from strongroom.fs.xattrs import PREFIX as XATTR_PREFIX
from strongroom.fs.xattrs import XattrCipher

PIECE_BLOCKS = 256


@dataclass(frozen=True)
class Problem:
    lower: str  # path relative to the volume
    plain: str | None  # the plaintext path, when its name could be read
    what: str
    damage: bool = True  # False: a leftover that loses nothing (e.g. an orphaned long-name sidecar)


@dataclass
class Report:
    directories: int = 0
    files: int = 0
    blocks: int = 0
    symlinks: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def damaged(self) -> bool:
        return any(p.damage for p in self.problems)


class Checker:
    def __init__(
        self,
        volume: Path,
        keys: VolumeKeys,
        long_name_max: int,
        derived_tweaks: bool = True,
        holes: bool = True,
        bound_xattrs: bool = True,
    ) -> None:
        self.volume = volume
        self.derived_tweaks = derived_tweaks  # format version 2 (FORMAT.md §6)
        self.holes = holes  # format version 3: every block of a file but its last may be a hole (§5)
        self.bound_xattrs = bound_xattrs  # format version 4: attribute values bound to their file (§6)
        self.keys = keys
        self.names = names.NameCipher(keys.names, long_name_max)
        self.tweaks = names.Tweaks(keys.version if derived_tweaks else 1, keys.dir_ids, keys.volume_id)
        self.xattrs = XattrCipher(keys.xattr_names, keys.xattr_values, keys.salted)
        self.report = Report()
        self._rel: dict[Path, str] = {}  # the short name of the directory being checked -> its path below the volume

    def _problem(self, lower: Path, plain: str | None, what: str, damage: bool = True) -> None:
        """``lower``: where the entry is, as a path below the volume (``_at`` knows the short
        name each is reached by)."""
        if lower in self._rel:  # the directory itself
            shown = self._rel[lower] or "."
        elif lower.parent in self._rel:
            rel = self._rel[lower.parent]
            shown = f"{rel}/{lower.name}" if rel else lower.name
        else:
            shown = str(lower.relative_to(self.volume))
        self.report.problems.append(Problem(shown, plain, what, damage))

    def run(self) -> Report:
        """Every directory, one at a time from a stack (a tree may be of any depth), each
        reached through descriptors (lowerwalk.py)."""
        stack: list[tuple[str, str, bytes | None]] = [("", "/", None)]
        with Tree(self.volume) as tree:
            while stack:
                rel, plain, parent_iv = stack.pop()
                try:
                    with tree.directory(rel) as here:
                        self._rel = {here: rel}
                        below = self._directory(here, rel, plain, parent_iv)
                except OSError as e:  # swapped for a symlink meanwhile, unreadable: named, the rest checked
                    self._problem(self.volume / rel, plain, f"directory could not be opened ({e.strerror})")
                    continue
                stack.extend(reversed(below))
        return self.report

    def _directory(self, lower: Path, rel: str, plain: str, parent_iv: bytes | None) -> list[tuple[str, str, bytes | None]]:
        """Check one directory (reached as ``lower``); its subdirectories, to be checked next."""
        self.report.directories += 1
        top = rel == ""
        try:
            stored = sidecar.read_bounded(lower / names.DIRIV, self.tweaks.stored_max)
        except OSError as e:  # a symlink, FIFO, device or oversized file: never read
            self._problem(lower, plain, f"directory tweak unreadable ({e.strerror}): no name in it can be read")
            return []
        own = rel.rpartition("/")[2]
        if stored is not None:
            try:
                iv = self.tweaks.read(stored, parent_iv, own)
            except names.BadName as e:
                self._problem(lower, plain, f"{e}: no name in it can be read")
                return []
            if len(stored) > names.DIRIV_BYTES + names.TAG_BYTES:
                self._problem(lower, plain, "a directory move was interrupted (its tweak is valid in two places)", damage=False)
        elif parent_iv is None or not self.tweaks.derived:  # the root, or a version-1 volume
            self._problem(lower, plain, "directory tweak unreadable (missing): no name in it can be read")
            return []
        else:
            iv = self.tweaks.derive(parent_iv, own)
        # (named "<short name>/.": the short name is a link in /proc, which the calls must not stop at)
        self._attributes(lower, plain, xattrs.dir_binding(iv) if self.bound_xattrs else None, f"{lower}/.")
        entries = sorted(os.listdir(lower))
        present = set(entries)
        below: list[tuple[str, str, bytes | None]] = []
        for n in entries:
            path = lower / n
            if n == names.DIRIV or (top and (n.startswith(CONFIG) or n.startswith("strongroom.acl.json"))):
                continue
            if top and n == journal.DIR:
                if path.is_symlink() or not path.is_dir():
                    self._problem(path, None, "the shrink journal is not a directory (not followed)")
                    continue
                for record in journal.pending(str(self.volume)):
                    self._problem(Path(record), None, "an interrupted shrink, finished at the next mount", damage=False)
                continue
            if n.startswith(names.LONG_PREFIX) and n.endswith(names.LONG_SUFFIX):
                if n[: -len(names.LONG_SUFFIX)] not in present:
                    self._problem(path, None, "long-name sidecar without its entry (left by a crash)", damage=False)
                continue
            if top and n == reencrypt.JOURNAL:  # FORMAT.md §6: a reserved name, not a stray one
                self._problem(path, None, "an interrupted reencrypt: run `fs reencrypt` again to finish it", damage=False)
                continue
            if n.startswith(reencrypt.TMP_PREFIX):
                self._problem(path, None, "a copy left by an interrupted reencrypt (the next pass removes it)", damage=False)
                continue
            if names.is_reserved(n):
                self._problem(path, None, "unexpected reserved name", damage=False)
                continue
            name = self._name(lower, n, iv)
            child = None if name is None else (plain.rstrip("/") + "/" + name)
            if path.is_symlink():
                self._symlink(path, child)
            elif path.is_dir():
                below.append((f"{rel}/{n}" if rel else n, child or "?", iv))
            elif path.is_file():
                self._file(path, child)
        return below

    def _name(self, lower: Path, n: str, iv: bytes) -> str | None:
        try:
            if names.is_long(n):
                full = names.sidecar_text(n, sidecar.read_bounded(lower / (n + names.LONG_SUFFIX), names.LONG_SIDECAR_MAX))
                self.names.check_form(full, True)
                return os.fsdecode(self.names.decrypt(full, iv))
            self.names.check_form(n, False)
            return os.fsdecode(self.names.decrypt(n, iv))
        except (names.BadName, OSError) as e:
            self._problem(lower / n, None, str(e))
            return None

    def _file(self, lower: Path, plain: str | None) -> None:
        self.report.files += 1
        size = lower.stat().st_size
        binding = None
        if self.bound_xattrs:
            try:
                with open(lower, "rb") as f:
                    binding = xattrs.header_binding(f.read(content.HEADER)) if size else xattrs.EMPTY
            except content.DamagedFile:
                binding = xattrs.EMPTY  # the header's own problem is reported below
        self._attributes(lower, plain, binding)
        if size == 0:
            return
        hole_limit = 0
        try:
            plain_size = content.plain_size(size)
            if self.holes:
                hole_limit = (plain_size - 1) // content.BLOCK
        except content.DamagedFile as e:
            self._problem(lower, plain, str(e))
        with open(lower, "rb") as f:
            try:
                header = content.FileHeader.decode(
                    f.read(content.HEADER), self.keys.kek, self.keys.volume_id, self.keys.kind(FILE)
                )
            except content.DamagedFile as e:
                self._problem(lower, plain, f"header: {e}: the whole file is unreadable")
                return
            cipher = content.FileCipher(header)
            for first, chunk in self._pieces(f):
                try:
                    cipher.open(first, chunk, hole_limit)
                    self.report.blocks += -(-len(chunk) // content.CBLOCK)
                except content.DamagedFile:
                    for k, start in enumerate(range(0, len(chunk), content.CBLOCK)):  # which blocks
                        self.report.blocks += 1
                        try:
                            cipher.open(first + k, chunk[start : start + content.CBLOCK], hole_limit)
                        except content.DamagedFile as e:
                            self._problem(lower, plain, str(e))

    @staticmethod
    def _pieces(f: object) -> Iterator[tuple[int, bytes]]:
        first = 0
        while True:
            chunk = f.read(PIECE_BLOCKS * content.CBLOCK)  # type: ignore[attr-defined]
            if not chunk:
                return
            yield first, chunk
            first += PIECE_BLOCKS

    def _symlink(self, lower: Path, plain: str | None) -> None:
        self.report.symlinks += 1
        raw = os.readlink(lower)
        try:
            sealed = names.unb64u(raw)
            header = content.FileHeader.decode(
                sealed[: content.HEADER], self.keys.kek, self.keys.volume_id, self.keys.kind(SYMLINK)
            )
            content.FileCipher(header).open(0, sealed[content.HEADER :])
        except (ValueError, content.DamagedFile) as e:
            self._problem(lower, plain, f"symlink target does not decrypt ({e})")

    def _attributes(self, lower: Path, plain: str | None, binding: bytes | None = None, at: str | None = None) -> None:
        """The attribute values of ``lower`` (reached as ``at`` if given)."""
        name = lower if at is None else at
        try:
            attrs = os.listxattr(name, follow_symlinks=False)
        except OSError:
            return
        for a in attrs:
            if not a.startswith(XATTR_PREFIX):
                continue
            try:
                self.xattrs.plain_name(a)
                self.xattrs.open_value(a, os.getxattr(name, a, follow_symlinks=False), binding)
            except Exception as e:  # noqa: BLE001 - any failure to open is damage
                self._problem(lower, plain, f"extended attribute does not open ({type(e).__name__})")
