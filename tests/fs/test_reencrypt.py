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
    # fsck in between: every name holds a whole file, and the journal (and any copy) is named
    # for what it is, not as a stray reserved name
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile), "--json")
    assert r.returncode == 0, r.stdout
    found = json.loads(r.stdout)["problems"]
    assert not [p for p in found if p["damage"] or "unexpected" in p["what"]], found
    assert any("interrupted reencrypt" in p["what"] for p in found), found
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


def test_reencrypt_keeps_holes_and_special_files_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """A 2 GiB sparse file, a FIFO, a socket, a hard link, long names: holes stay holes (the
    lower file stays as small as its data), special files are left unopened, nothing is left
    behind; a failure keeps the journal for a resume and --abort forgets it."""
    import socket
    import stat

    m = Mount(tmp_path).init().start()
    long_name = "L" * 220
    pieces = {0: os.urandom(5000), 1 << 30: os.urandom(70_000), (2 << 30) - 3: b"end"}
    try:
        with open(m.mnt / "sparse", "wb") as f:
            for at, data in pieces.items():
                f.seek(at)
                f.write(data)
        (m.mnt / long_name).write_bytes(b"long")
        os.link(m.mnt / long_name, m.mnt / "hard")
        os.mkfifo(m.mnt / "fifo")
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(m.mnt / "sock"))
        s.close()
        (m.mnt / "bad").write_bytes(os.urandom(10_000))
    finally:
        m.stop()
    lower_sparse = max((p for p in m.lower_files() if p.stat().st_size > 1 << 30), key=lambda p: p.stat().st_size)
    blocks_before = lower_sparse.stat().st_blocks
    # one damaged file stops the pass: the copy being written is removed, the journal kept
    bad = m.lower_of("bad")
    with open(bad, "r+b") as f:
        f.seek(5000)
        f.write(b"\xff" * 16)
    start = time.monotonic()
    r = cli("fs", "reencrypt", str(m.lower), "--passphrase-file", str(m.pwfile), timeout=300)
    assert r.returncode == 1 and b"stopped at" in r.stderr and b"resume" in r.stderr, r.stderr
    assert not list(m.lower.rglob("strongroom.tmp.*"))
    r = cli("fs", "reencrypt", str(m.lower), "--abort", timeout=60)
    assert r.returncode == 0, r.stderr
    assert not (m.lower / "strongroom.reencrypt.journal").exists()
    bad.unlink()  # the damaged file goes; the pass then completes
    r = cli("fs", "reencrypt", str(m.lower), "--passphrase-file", str(m.pwfile), "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # the blocks holding data (whole blocks around each piece), not the 2 GiB between them
    assert out["special_files_kept"] == 2 and sum(map(len, pieces.values())) < out["bytes"] < 100_000
    assert time.monotonic() - start < 120  # 2 GiB of holes are not read, let alone written
    assert not list(m.lower.rglob("strongroom.tmp.*")) and not (m.lower / "strongroom.reencrypt.journal").exists()
    after = max((p for p in m.lower_files() if p.stat().st_size > 1 << 30), key=lambda p: p.stat().st_size)
    assert after.stat().st_blocks <= blocks_before + 64  # still sparse
    m.start()
    try:
        with open(m.mnt / "sparse", "rb") as f:
            for at, data in pieces.items():
                f.seek(at)
                assert f.read(len(data)) == data
            f.seek(123 << 20)
            assert f.read(4096) == bytes(4096)
        assert os.stat(m.mnt / "sparse").st_size == 2 << 30
        assert (m.mnt / long_name).read_bytes() == b"long" and (m.mnt / "hard").stat().st_nlink == 2
        assert stat.S_ISFIFO((m.mnt / "fifo").lstat().st_mode) and stat.S_ISSOCK((m.mnt / "sock").lstat().st_mode)
    finally:
        m.stop()
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0, r.stdout
