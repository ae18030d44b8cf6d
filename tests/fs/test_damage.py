"""Damage that an earlier reader missed: impossible lower sizes read as EIO through the mount (not
as empty files), `fs fsck` names every such file without crashing, and a damaged config says so
instead of blaming the passphrase."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from strongroom.fs import config, content
from tests.fs.mounts import PASSPHRASE, Mount
from tests.serverproc import cli

PLAIN = 5 * content.BLOCK + 100  # six blocks, the last short


def _damaged_sizes() -> list[int]:
    cut_short = list(range(1, content.HEADER + content.OVERHEAD + 1))  # 1..112: no byte of a block fits
    bare_tails = [content.block_offset(k) + r for k in range(1, 5) for r in range(1, content.OVERHEAD + 1)]
    return cut_short + bare_tails


def test_impossible_sizes_read_as_eio_and_fsck_names_each(tmp_path: Path) -> None:
    sizes = _damaged_sizes()
    m = Mount(tmp_path).init().start()
    for i in range(len(sizes)):
        (m.mnt / f"f{i:03d}").write_bytes(os.urandom(PLAIN))
    m.stop()
    lower = sorted(p for p in m.lower_files() if p.stat().st_size == content.lower_size(PLAIN))
    assert len(lower) == len(sizes)
    for p, size in zip(lower, sizes, strict=True):
        os.truncate(p, size)
    m.start()
    try:
        for name in sorted(os.listdir(m.mnt)):
            assert os.stat(m.mnt / name).st_size > 0, name  # not an empty file
            with pytest.raises(OSError) as e:
                (m.mnt / name).read_bytes()
            assert e.value.errno == errno.EIO, name
    finally:
        m.stop()
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile), "--json")
    assert r.returncode == 1, r.stderr
    assert b"Traceback" not in r.stderr
    named = {p["lower"] for p in json.loads(r.stdout)["problems"] if p["damage"]}
    assert {str(p.relative_to(m.lower)) for p in lower} <= named


def test_a_damaged_config_is_not_called_a_wrong_passphrase(tmp_path: Path) -> None:
    m = Mount(tmp_path).init()
    path = m.lower / config.CONFIG
    good = json.loads(path.read_text())
    with pytest.raises(config.ConfigError, match="wrong passphrase"):
        config.VolumeConfig.load(m.lower).unlock_passphrase("not the passphrase")
    for damage in ("salt", "sealed_kek", "volume_id", "memory_kib"):
        bad = json.loads(json.dumps(good))
        source = bad["key_sources"][0]
        if damage == "salt":
            source["kdf"]["salt"] = source["kdf"]["salt"][::-1]
        elif damage == "memory_kib":
            source["kdf"]["memory_kib"] += 8
        elif damage == "sealed_kek":
            first = source["sealed_kek"][0]
            source["sealed_kek"] = ("B" if first == "A" else "A") + source["sealed_kek"][1:]  # always a change
        else:
            bad["volume_id"] = bad["volume_id"][::-1]
        path.write_text(json.dumps(bad))
        with pytest.raises(config.ConfigError, match="is damaged: its checksum"):
            config.VolumeConfig.load(m.lower).unlock_passphrase(PASSPHRASE)
        r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
        assert r.returncode == 2 and b"is damaged" in r.stderr and b"wrong passphrase" not in r.stderr, r.stderr
    path.write_text(json.dumps(good))
    assert config.VolumeConfig.load(m.lower).unlock_passphrase(PASSPHRASE)
