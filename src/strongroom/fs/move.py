"""Moving a plaintext directory into a mounted volume (`strongroom fs move`), like
navencrypt-move: copy, verify, remove the original, leave a symlink at the old path.

A journal beside the source (`<PATH>.strongroom-move.json`) records the destination and the
phase, so an interrupted move finishes when run again without losing or duplicating data:
- copy: each file is copied to a temporary name and renamed into place once whole and fsync'd;
  a rerun skips files already there with the same size and mtime;
- verify: every file is compared byte for byte (a mismatch is copied again and re-verified);
- swap: the original is renamed aside (atomic), the symlink is created, then the aside copy is
  deleted.  A crash between any two steps leaves either the original or the symlink in place.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strongroom.fs import durable, sidecar
from strongroom.fs.lowerwalk import Tree, remove_tree

JOURNAL_MAX = 64 << 10  # bytes: the journal holds a destination and a phase


class MoveError(Exception):
    pass


@dataclass
class MoveResult:
    files: int = 0
    bytes: int = 0
    skipped: int = 0
    already: bool = False


def _journal(src: Path) -> Path:
    return src.with_name(src.name + ".strongroom-move.json")


def _aside(src: Path) -> Path:
    return src.with_name(src.name + ".strongroom-moving")


def _save(journal: Path, state: dict[str, str]) -> None:
    durable.replace_file(journal, json.dumps(state).encode(), 0o644)


def _copy_meta(src: Path | str, dst: Path | str) -> None:
    """Owner, mode, user.* attributes and times (a directory is named "<short name>/.": its
    short name is a link in /proc, which the calls must not stop at)."""
    st = os.lstat(src)
    os.chown(dst, st.st_uid, st.st_gid, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(dst, st.st_mode & 0o7777)
        for attr in os.listxattr(src):
            if attr.startswith("user."):
                os.setxattr(dst, attr, os.getxattr(src, attr))
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _same(src: Path, dst: Path) -> bool:
    try:
        a, b = src.lstat(), dst.lstat()
    except FileNotFoundError:
        return False
    return a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns


def _special(st: os.stat_result) -> bool:
    """A FIFO, socket or device node: made again at the destination, never opened (a FIFO's open
    would wait for a writer forever)."""
    return stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)


def _copy_special(src: Path, dst: Path, st: os.stat_result) -> None:
    if dst.exists() or dst.is_symlink():
        dst.unlink()
    os.mknod(dst, stat.S_IFMT(st.st_mode) | 0o600, st.st_rdev)
    _copy_meta(src, dst)


def _copy_file(src: Path, dst: Path) -> int:
    tmp = dst.with_name(f".{dst.name}.strongroom-partial")
    with os.fdopen(sidecar.open_regular(src, os.O_RDONLY), "rb") as fin, open(tmp, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
        fout.flush()
        os.fsync(fout.fileno())
    _copy_meta(src, tmp)
    os.replace(tmp, dst)
    return src.stat().st_size


def move_size(src: Path) -> int:
    """The bytes a move of ``src`` copies (for its progress bar), at any depth."""
    total = 0
    with Tree(src) as tree:
        for d in tree.walk():
            total += sum(os.lstat(d.here / n).st_size for n in d.filenames)
    return total


def move(src: Path, dest: Path, progress: Callable[[int], None] = lambda n: None) -> MoveResult:
    src = Path(os.path.abspath(src))
    journal = _journal(src)
    try:
        raw = sidecar.read_bounded(journal, JOURNAL_MAX)
        state = None if raw is None else json.loads(raw)
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or type(e).__name__
        raise MoveError(f"{journal} is not a move journal ({why}): remove it") from None
    if state is None:
        if src.is_symlink() and os.path.realpath(src) == os.path.realpath(dest):
            return MoveResult(already=True)
        if not src.is_dir() or src.is_symlink():
            raise MoveError(f"{src} is not a directory")
        if dest.exists() and any(dest.iterdir()):
            raise MoveError(f"{dest} exists and is not empty")
        state = {"dest": str(dest), "phase": "copy"}
        _save(journal, state)
    elif state["dest"] != str(dest):
        raise MoveError(f"an unfinished move of {src} goes to {state['dest']}: finish that one first")
    result = MoveResult()
    origin = src if state["phase"] in ("copy", "verify") else _aside(src)
    if state["phase"] == "copy":
        dest.mkdir(parents=True, exist_ok=True)
        rels = []
        # both trees reached directory by directory through descriptors: any depth (lowerwalk.py)
        with Tree(origin) as source, Tree(dest) as target_tree:
            for d in source.walk():
                rels.append(d.rel)
                with target_tree.directory(d.rel) as target:
                    for n in d.dirnames:
                        (target / n).mkdir(exist_ok=True)
                    for n in d.filenames:
                        s, t = d.here / n, target / n
                        st = s.lstat()
                        if s.is_symlink():
                            if not t.is_symlink():
                                os.symlink(os.readlink(s), t)
                                _copy_meta(s, t)
                        elif _special(st):
                            _copy_special(s, t, st)
                        elif _same(s, t):
                            result.skipped += 1
                        else:
                            result.bytes += _copy_file(s, t)
                            result.files += 1
                        progress(s.lstat().st_size)
            for rel in reversed(rels):  # a directory's times after everything in it is made
                with source.directory(rel) as s, target_tree.directory(rel) as t:
                    _copy_meta(f"{s}/.", f"{t}/.")
        state["phase"] = "verify"
        _save(journal, state)
    if state["phase"] == "verify":
        with Tree(origin) as source, Tree(dest) as target_tree:
            for d in source.walk():
                with target_tree.directory(d.rel) as target:
                    _verify(d.here, target, d.filenames, dest / d.rel)
        state["phase"] = "swap"
        _save(journal, state)
    if state["phase"] == "swap":
        aside = _aside(src)
        if src.exists() and not src.is_symlink():
            os.rename(src, aside)
        if not src.is_symlink():
            os.symlink(dest, src)
        if aside.exists():
            remove_tree(aside)
        journal.unlink()
    return result


def _verify(here: Path, target: Path, filenames: list[str], shown: Path) -> None:
    """One directory's entries compared with their copies (``shown``: its path at the destination)."""
    for n in filenames:
        s, t = here / n, target / n
        st = s.lstat()
        if s.is_symlink():
            if os.readlink(s) != os.readlink(t):
                raise MoveError(f"verification failed: symlink {shown / n}")
        elif _special(st):
            tt = t.lstat()
            if stat.S_IFMT(tt.st_mode) != stat.S_IFMT(st.st_mode) or tt.st_rdev != st.st_rdev:
                raise MoveError(f"verification failed: {shown / n} is not the same kind of special file as the original")
        elif not filecmp.cmp(s, t, shallow=False):
            _copy_file(s, t)
            if not filecmp.cmp(s, t, shallow=False):
                raise MoveError(f"verification failed: {shown / n} differs from the original")
