"""docs/FORMAT.md §8, row by row: what an attacker who can write the lower directory achieves.
Each tamper is done while the volume is unmounted (so no cache answers), then read through a
fresh mount."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from strongroom.fs import content
from tests.fs.mounts import Mount

BS, CB, HDR = content.BLOCK, content.CBLOCK, content.HEADER


@pytest.fixture
def two_files(tmp_path: Path) -> Iterator[Mount]:
    m = Mount(tmp_path).init().start()
    (m.mnt / "a").write_bytes(b"A" * (3 * BS))
    (m.mnt / "b").write_bytes(b"B" * (3 * BS))
    m.stop()
    yield m
    m.stop()


def _lower(m: Mount, plain_size: int = 3 * BS) -> list[Path]:
    return sorted(p for p in m.lower_files() if p.stat().st_size == content.lower_size(plain_size))


def _read_error(path: Path) -> int | None:
    try:
        path.read_bytes()
    except OSError as e:
        return e.errno
    return None


def _patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _log(m: Mount) -> str:
    return m.log.read_text()


def test_bit_flip_in_a_block_is_eio_and_logged_once(two_files: Mount) -> None:
    m = two_files
    target = _lower(m)[0]
    raw = bytearray(target.read_bytes())
    raw[HDR + CB + 100] ^= 1  # block 1
    target.write_bytes(raw)
    m.start()
    names = [n for n in ("a", "b") if _read_error(m.mnt / n) == errno.EIO]
    assert len(names) == 1
    with open(m.mnt / names[0], "rb") as f:
        assert f.read(BS) == names[0].upper().encode() * BS  # block 0 is still fine
        with pytest.raises(OSError):
            f.read(BS)
    _read_error(m.mnt / names[0])
    m.stop()
    assert _log(m).count("block 1 does not authenticate") == 1


@pytest.mark.parametrize(
    "where", ["header", "zeroed last block", "block from the other file", "blocks swapped", "cut inside a block"]
)
def test_tampering_reads_as_eio(two_files: Mount, where: str) -> None:
    m = two_files
    a, b = _lower(m)
    if where == "header":
        _patch(a, 10, b"\xff")
    elif where == "zeroed last block":  # a zeroed earlier block reads as a hole (test_sparse.py)
        _patch(a, HDR + 2 * CB, bytes(CB))
    elif where == "block from the other file":
        _patch(a, HDR + CB, b.read_bytes()[HDR + CB : HDR + 2 * CB])
    elif where == "blocks swapped":
        raw = a.read_bytes()
        _patch(a, HDR, raw[HDR + CB : HDR + 2 * CB] + raw[HDR : HDR + CB])
    elif where == "cut inside a block":
        os.truncate(a, HDR + 2 * CB + 100)
    m.start()
    errors = sorted(_read_error(m.mnt / n) or 0 for n in ("a", "b"))
    assert errors == [0, errno.EIO]


def test_what_the_format_does_not_detect(two_files: Mount) -> None:
    """Stated in FORMAT.md §8: truncation at a block boundary, rollback, swapping whole files."""
    m = two_files
    m.start()
    (m.mnt / "a").write_bytes(b"1" * BS + b"2" * BS)
    m.stop()
    a = next(p for p in m.lower_files() if p.stat().st_size == content.lower_size(2 * BS))
    old = a.read_bytes()
    m.start()
    with open(m.mnt / "a", "r+b") as f:
        f.write(b"3" * BS)  # block 0 rewritten
    m.stop()
    _patch(a, HDR, old[HDR : HDR + CB])  # roll block 0 back
    m.start()
    assert (m.mnt / "a").read_bytes() == b"1" * BS + b"2" * BS  # rollback: not detected
    m.stop()
    os.truncate(a, HDR + CB)  # cut at a block boundary
    m.start()
    assert (m.mnt / "a").read_bytes() == b"1" * BS  # shorter, silently
    m.stop()
    lower_a, lower_b = a, next(p for p in m.lower_files() if p != a)
    da, db = lower_a.read_bytes(), lower_b.read_bytes()
    lower_a.write_bytes(db)
    lower_b.write_bytes(da)  # whole files swapped under their names
    m.start()
    assert (m.mnt / "a").read_bytes() == b"B" * (3 * BS) and (m.mnt / "b").read_bytes() == b"1" * BS


def test_moved_entry_and_edited_tweak(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start()
    request_stop = m.stop
    (m.mnt / "d1").mkdir()
    (m.mnt / "d2").mkdir()
    (m.mnt / "d1" / "secret").write_text("x")
    m.stop()
    d1 = next(
        p
        for p in m.lower.iterdir()
        if p.is_dir() and any(q.is_file() and not q.name.startswith("strongroom.") for q in p.iterdir())
    )
    d2 = next(p for p in m.lower.iterdir() if p.is_dir() and p != d1)
    entry = next(q for q in d1.iterdir() if not q.name.startswith("strongroom."))
    os.rename(entry, d2 / entry.name)  # an entry moved to another directory: its name fails there
    m.start()
    try:
        assert os.listdir(m.mnt / "d1") == [] and os.listdir(m.mnt / "d2") == []
    finally:
        request_stop()
    assert "name does not decrypt" in _log(m)
