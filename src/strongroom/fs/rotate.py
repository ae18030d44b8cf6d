"""KEK rotation (`strongroom fs rotate`): a new volume key-encryption key, every wrapped key
re-wrapped, no data rewritten.  Crash-safe and resumable:

1. the new KEK, sealed under every key source, and the keys wrapped under it are added to the
   config as "rotation" (atomic replace) -- from here a mount refuses until rotation finishes;
2. every file header and symlink target is re-wrapped (a header is one 60-byte in-place write;
   a symlink is replaced by rename), each checked first: one already under the new KEK is left;
3. the config's sources and wrapped keys are replaced by the new ones, and "rotation" removed.
A rerun after a crash at any point resumes with the KEK recorded in step 1.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strongroom.fs import config, content, journal, keys, names, sidecar
from strongroom.fs.lowerwalk import Tree
from strongroom.fs.names import b64u, unb64u

ROTATION = "rotation"


@dataclass
class RotationResult:
    headers: int = 0
    symlinks: int = 0
    already: int = 0
    refused: list[str] = field(default_factory=list)  # lower entries not rewrapped, and why


def lower_entries(volume: Path) -> Iterator[tuple[str, Path]]:
    """(path below the volume, a short name of it valid until the next) of every lower entry
    but directories and the volume's own files, in a tree of any depth (lowerwalk.py)."""
    with Tree(volume) as tree:
        for d in tree.walk():
            if d.rel == "" and journal.DIR in d.dirnames:  # the journal's records are no files of the volume
                d.dirnames.remove(journal.DIR)
            for n in d.filenames:
                if names.is_reserved(n) or n.startswith(config.CONFIG) or n.endswith(names.LONG_SUFFIX):
                    continue
                yield d.rel_of(n), d.here / n


def rotate(
    volume: Path,
    source_keys: Callable[[dict[str, Any]], bytes],
    progress: Callable[[int], None] = lambda n: None,
) -> RotationResult:
    """``source_keys(source)`` gives each key source's 32-byte source key (it must open it)."""
    cfg = config.VolumeConfig.load(volume)
    pending = cfg.extra.get(ROTATION)
    sks = [source_keys(s) for s in cfg.key_sources]
    old = cfg.unlock_with_source_key(cfg.key_sources[0], sks[0])
    for s, sk in zip(cfg.key_sources, sks, strict=True):  # every secret must be the right one
        cfg.unlock_with_source_key(s, sk)
    if pending is None:
        new_kek = os.urandom(32)
        new_sources = []
        for s, sk in zip(cfg.key_sources, sks, strict=True):
            fresh = dict(s)
            fresh["sealed_kek"] = config.seal_kek(sk, cfg.volume_id, s["type"], new_kek, cfg.version)
            new_sources.append(fresh)
        new = old.rewrapped(new_kek)
        cfg.extra[ROTATION] = {"key_sources": new_sources, "wrapped": {k: b64u(v) for k, v in new.wrapped().items()}}
        cfg.save(volume)
    else:
        first = pending["key_sources"][0]
        new_kek = config.open_kek(sks[0], cfg.volume_id, first, cfg.version)
    result = RotationResult()
    for rel, path in lower_entries(volume):
        if path.is_symlink():
            _rotate_symlink(path, old.kek, new_kek, cfg.volume_id, old.kind(keys.SYMLINK), result)
        elif path.is_file() and path.stat().st_size > 0:
            _rotate_header(path, rel, old.kek, new_kek, cfg.volume_id, old.kind(keys.FILE), result)
        progress(1)
    pending = cfg.extra.pop(ROTATION)
    cfg.retire(old.kek, new_kek)  # standalone files made with the old KEK stay readable
    cfg.key_sources = pending["key_sources"]
    cfg.wrapped = {k: unb64u(v) for k, v in pending["wrapped"].items()}
    cfg.save(volume)
    return result


def _rewrap(raw: bytes, old_kek: bytes, new_kek: bytes, volume_id: bytes, kind: int) -> bytes | None:
    """The header re-wrapped under new_kek, or None if it already is."""
    try:
        content.FileHeader.decode(raw, new_kek, volume_id, kind)
        return None
    except content.DamagedFile:
        pass
    header = content.FileHeader.decode(raw, old_kek, volume_id, kind)  # DamagedFile: leave it to fsck
    return header.encode(new_kek, volume_id)


def _rotate_header(
    path: Path, rel: str, old_kek: bytes, new_kek: bytes, volume_id: bytes, kind: int, result: RotationResult
) -> None:
    try:
        fd = sidecar.open_regular(path, os.O_RDWR)
    except FileNotFoundError:
        return
    except sidecar.UnsafeFile as e:  # swapped for a FIFO or a symlink since the walk: fsck's to name
        result.refused.append(f"{rel}: {e.why}")
        return
    try:
        raw = os.pread(fd, content.HEADER, 0)
        try:
            new = _rewrap(raw, old_kek, new_kek, volume_id, kind)
        except content.DamagedFile:
            return
        if new is None:
            result.already += 1
            return
        os.pwrite(fd, new, 0)
        os.fsync(fd)
        result.headers += 1
    finally:
        os.close(fd)


def _rotate_symlink(path: Path, old_kek: bytes, new_kek: bytes, volume_id: bytes, kind: int, result: RotationResult) -> None:
    raw = os.readlink(path)
    sealed = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
    try:
        new = _rewrap(sealed[: content.HEADER], old_kek, new_kek, volume_id, kind)
    except content.DamagedFile:
        return
    if new is None:
        result.already += 1
        return
    tmp = path.with_name(f"strongroom.tmp.{b64u(os.urandom(9))}")
    os.symlink(base64.urlsafe_b64encode(new + sealed[content.HEADER :]).rstrip(b"=").decode(), tmp)
    os.replace(tmp, path)
    result.symlinks += 1
