"""`fs reencrypt`: new file ids and keys, data rewritten and intact, hard links kept, resumable
after a real SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from strongroom.fs.fuse_ops import VolumeOps
from strongroom.fs.volume import init_volume, unlock
from tests.fs.mounts import PASSPHRASE, Mount
from tests.serverproc import cli


def _write(ops: VolumeOps, path: str, data: bytes) -> None:
    fh = ops.create(path, 0o640, os.O_WRONLY)
    ops.write(path, data, 0, fh)
    ops.release(path, fh)


def _file_ids(vol: Path) -> dict[int, bytes]:
    return {
        p.stat().st_ino: p.read_bytes()[8:24]
        for p in vol.rglob("*")
        if p.is_file() and not p.is_symlink() and not p.name.startswith("strongroom.") and p.stat().st_size
    }


def test_reencrypt_gives_new_keys_and_keeps_everything(tmp_path: Path) -> None:
    m = Mount(tmp_path)
    init_volume(m.lower, PASSPHRASE)
    keys = unlock(m.lower, lambda: PASSPHRASE)
    ops = VolumeOps(str(m.lower), keys)
    big = os.urandom(3 * 1024 * 1024 + 5)
    _write(ops, "/big", big)
    _write(ops, "/small", b"small")
    ops.link("/hard", "/small")
    ops.symlink("/sym", "big")
    ops.setxattr("/small", "user.tag", b"kept", 0)
    ids_before = set(_file_ids(m.lower).values())
    r = cli("fs", "reencrypt", str(m.lower), "--passphrase-file", str(m.pwfile), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["files"] == 2 and out["symlinks"] == 1 and out["bytes"] == len(big) + 5
    assert not ids_before & set(_file_ids(m.lower).values())  # every file has a new id (and key)
    m.start()
    try:
        assert (m.mnt / "big").read_bytes() == big and (m.mnt / "small").read_bytes() == b"small"
        assert (m.mnt / "hard").stat().st_ino == (m.mnt / "small").stat().st_ino  # still one file
        assert os.readlink(m.mnt / "sym") == "big" and os.getxattr(m.mnt / "small", "user.tag") == b"kept"
        assert oct((m.mnt / "small").stat().st_mode & 0o777) == oct(0o640)
    finally:
        m.stop()
    assert not list(m.lower.rglob("strongroom.tmp.*")) and not (m.lower / "strongroom.reencrypt.journal").exists()


def test_interrupted_reencrypt_resumes(tmp_path: Path) -> None:
    m = Mount(tmp_path)
    init_volume(m.lower, PASSPHRASE)
    ops = VolumeOps(str(m.lower), unlock(m.lower, lambda: PASSPHRASE))
    ops.mkdir("/d", 0o755)
    files = {f"/d/f{i}": os.urandom(50 + i % 5000) for i in range(800)}
    for path, data in files.items():
        _write(ops, path, data)
    proc = subprocess.Popen(
        [sys.executable, "-m", "strongroom.cli.main", "fs", "reencrypt", str(m.lower), "--passphrase-file", str(m.pwfile)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    journal = m.lower / "strongroom.reencrypt.journal"
    deadline = time.monotonic() + 60
    while (not journal.exists() or journal.stat().st_size < 200) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert journal.exists()
    r = cli("fs", "reencrypt", str(m.lower), "--passphrase-file", str(m.pwfile), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["resumed_past"] > 0
    m.start()
    try:
        for path, data in files.items():
            assert (m.mnt / path.lstrip("/")).read_bytes() == data
    finally:
        m.stop()
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0, r.stdout
