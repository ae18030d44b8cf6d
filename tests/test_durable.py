"""durable.replace_file where its temporary name is already taken: a symlink there is not
followed (its target stays as it was), a FIFO there does not block the writer, and a read-only
file left by a crash is replaced -- the temporary file is always a new one."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from strongroom import durable

pytestmark = pytest.mark.unit


def _replace_within(path: Path, data: bytes, seconds: float = 5) -> None:
    failed: list[BaseException] = []

    def run() -> None:
        try:
            durable.replace_file(path, data)
        except BaseException as e:  # noqa: BLE001 - reported below
            failed.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        with open(path.with_name(path.name + ".tmp"), "rb"):  # unblock the writer before failing
            pass
        pytest.fail("replace_file blocked on what sat at its temporary name")
    if failed:
        raise failed[0]


def test_a_symlink_at_the_temporary_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    (tmp_path / "f.tmp").symlink_to(victim)
    _replace_within(tmp_path / "f", b"new")
    assert victim.read_bytes() == b"keep me" and (tmp_path / "f").read_bytes() == b"new"


def test_a_fifo_at_the_temporary_name_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "f.tmp")
    _replace_within(tmp_path / "f", b"new")
    assert (tmp_path / "f").read_bytes() == b"new"


def test_a_read_only_leftover_is_replaced(tmp_path: Path) -> None:
    left = tmp_path / "f.tmp"
    left.write_bytes(b"half")
    left.chmod(0o400)
    durable.replace_file(tmp_path / "f", b"new", 0o400)
    assert (tmp_path / "f").read_bytes() == b"new" and not left.exists()
