"""Walking a directory tree of any depth without recursion and without paths longer than the
kernel takes: each directory is opened from the top through descriptors (beneath.py, never
through a symlink) and its entries are named through that descriptor, so a 1,000-deep tree
(whose full path passes PATH_MAX) is walked as a shallow one.  For the offline tools (fsck,
rotate, reencrypt, move), which run single-threaded."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from strongroom.fs.beneath import Beneath


@dataclass
class Dir:
    rel: str  # the directory's path below the top ("" for the top itself)
    here: Path  # a short name for it (/proc/self/fd/N), valid until the walk moves on
    dirnames: list[str]  # subdirectories (not symlinks), sorted; remove names to skip them
    filenames: list[str]  # every other entry, symlinks included, sorted

    def rel_of(self, name: str) -> str:
        return f"{self.rel}/{name}" if self.rel else name


class Tree:
    """A top directory, walked (``walk``) or reached entry by entry (``parent``)."""

    def __init__(self, top: Path) -> None:
        self.top = Path(os.path.abspath(top))
        self._beneath = Beneath(str(self.top))

    def close(self) -> None:
        self._beneath.close()

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def directory(self, rel: str) -> Iterator[Path]:
        """A short name of the directory ``rel`` below the top, for the block's length."""
        with self._beneath.directory(f"{self.top}/{rel}" if rel else str(self.top)) as here:
            yield Path(here)

    @contextlib.contextmanager
    def entry(self, rel: str) -> Iterator[Path]:
        """A short name of the entry ``rel`` (its parent reached as ``directory`` does)."""
        parent, _, name = rel.rpartition("/")
        with self.directory(parent) as here:
            yield here / name

    def walk(self) -> Iterator[Dir]:
        """Every directory, the top first, each before the ones below it (as os.walk, top-down,
        never following a symlink)."""
        stack = [""]
        while stack:
            rel = stack.pop()
            with self.directory(rel) as here:
                dirs: list[str] = []
                others: list[str] = []
                with os.scandir(here) as it:
                    for e in it:
                        (dirs if e.is_dir(follow_symlinks=False) else others).append(e.name)
                d = Dir(rel, here, sorted(dirs), sorted(others))
                yield d
            stack.extend(d.rel_of(n) for n in reversed(d.dirnames))


def remove_tree(top: Path) -> None:
    """rm -rf of ``top`` (a directory), never through a symlink, at any depth (shutil.rmtree
    recurses, and fails deep)."""
    with Tree(top) as tree:
        dirs = []
        for d in tree.walk():
            for n in d.filenames:
                os.unlink(d.here / n)
            dirs.append((d.rel, list(d.dirnames)))
        for rel, subdirs in reversed(dirs):  # each directory after every one below it
            with tree.directory(rel) as here:
                for n in subdirs:
                    os.rmdir(here / n)
    os.rmdir(top)
