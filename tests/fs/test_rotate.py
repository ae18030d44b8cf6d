"""`fs rotate`: a new KEK, every wrapped key re-wrapped, the old KEK opening nothing after, data
untouched; interrupted for real (SIGKILL) and finished by a rerun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strongroom.fs import config, content, keys
from strongroom.fs.fuse_ops import VolumeOps
from strongroom.fs.volume import init_volume, unlock
from tests.fs.mounts import PASSPHRASE, Mount
from tests.serverproc import cli

RECOVERY = "recovery words"


def _populate(vol: Path, files: int) -> dict[str, bytes]:
    ops = VolumeOps(str(vol), unlock(vol, lambda: PASSPHRASE))
    ops.mkdir("/d", 0o755)
    written = {}
    for i in range(files):
        path = f"/d/f{i}"
        data = os.urandom(100 + i)
        fh = ops.create(path, 0o644, os.O_WRONLY)
        ops.write(path, data, 0, fh)
        ops.release(path, fh)
        written[path] = data
    ops.symlink("/link", "d/f0")
    return written


def _lower_headers(vol: Path) -> list[bytes]:
    return [
        p.read_bytes()[: content.HEADER]
        for p in vol.rglob("*")
        if p.is_file() and not p.name.startswith("strongroom.") and p.stat().st_size
    ]


def test_rotation_rewraps_everything_and_the_old_kek_opens_nothing(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    init_volume(vol, PASSPHRASE, recovery_passphrase=RECOVERY)
    written = _populate(vol, 20)
    old = unlock(vol, lambda: PASSPHRASE)
    lower_d = Path(VolumeOps(str(vol), old).paths.lower("/d"))
    before = lower_d.stat()
    data_before = {
        p.name: p.read_bytes()[content.HEADER :]
        for p in vol.rglob("*")
        if p.is_file() and not p.name.startswith("strongroom.") and p.stat().st_size > content.HEADER
    }
    pw, rec = tmp_path / "pw", tmp_path / "rec"
    pw.write_text(PASSPHRASE)
    rec.write_text(RECOVERY)
    r = cli("fs", "rotate", str(vol), "--passphrase-file", str(pw))
    assert r.returncode != 0 and b"recovery" in r.stderr.lower()  # every source's secret is needed
    r = cli("fs", "rotate", str(vol), "--passphrase-file", str(pw), "--recovery-passphrase-file", str(rec), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["headers"] == 20 and out["symlinks"] == 1
    new = unlock(vol, lambda: RECOVERY)
    assert new.kek != old.kek and new.names == old.names and new.rules_mac == old.rules_mac
    cfg = config.VolumeConfig.load(vol)
    with pytest.raises(config.ConfigError):
        cfg.unlock_with_kek(old.kek)  # the old KEK opens no wrapped key
    for raw in _lower_headers(vol):
        with pytest.raises(content.DamagedFile):
            content.FileHeader.decode(raw, old.kek, old.volume_id, keys.FILE)  # nor any file key
        content.FileHeader.decode(raw, new.kek, new.volume_id, keys.FILE)
    data_after = {
        p.name: p.read_bytes()[content.HEADER :]
        for p in vol.rglob("*")
        if p.is_file() and not p.name.startswith("strongroom.") and p.stat().st_size > content.HEADER
    }
    assert data_after == data_before and lower_d.stat().st_ino == before.st_ino  # no data rewritten
    ops = VolumeOps(str(vol), new)
    for path, data in written.items():
        fh = ops.open(path, os.O_RDONLY)
        assert ops.read(path, 10_000, 0, fh) == data
        ops.release(path, fh)
    assert ops.readlink("/link") == "d/f0"
    with pytest.raises(keys.WrongKey):
        keys.open_sealed(old.kek, b"", b"x" * 40, "nothing")


def test_interrupted_rotation_blocks_mounts_and_a_rerun_finishes(tmp_path: Path) -> None:
    m = Mount(tmp_path)
    init_volume(m.lower, PASSPHRASE)
    written = _populate(m.lower, 1500)
    proc = subprocess.Popen(
        [sys.executable, "-m", "strongroom.cli.main", "fs", "rotate", str(m.lower), "--passphrase-file", str(m.pwfile)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while "rotation" not in json.loads((m.lower / "strongroom.volume.json").read_text()) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)  # mid-way: 1,500 fsync'd headers take far longer than one poll
    proc.wait()
    assert "rotation" in json.loads((m.lower / "strongroom.volume.json").read_text())
    r = cli("fs", "mount", str(m.lower), str(m.mnt), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 2 and b"rotation was interrupted" in r.stderr
    r = cli("fs", "rotate", str(m.lower), "--passphrase-file", str(m.pwfile), "--json")
    assert r.returncode == 0, r.stderr
    m.start()
    try:
        for path, data in list(written.items())[::100]:
            assert (m.mnt / path.lstrip("/")).read_bytes() == data
        assert len(os.listdir(m.mnt / "d")) == 1500
    finally:
        m.stop()
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0, r.stdout


def test_standalone_files_made_with_the_volume_survive_rotations_and_reencrypt(tmp_path: Path) -> None:
    """A backup made with `fs encrypt --volume` before two rotations and a reencrypt still
    decrypts; one made between the rotations too.  The retired KEKs are sealed under the current
    one: a retired KEK alone opens neither the config nor any file of the volume."""
    m = Mount(tmp_path).init()
    vol, pw = m.lower, str(m.pwfile)
    _populate(vol, 3)
    backups: list[tuple[Path, bytes]] = []
    keks = [config.VolumeConfig.load(vol).unlock_passphrase(PASSPHRASE).kek]

    def backup(tag: str) -> None:
        plain, enc = tmp_path / f"{tag}.plain", tmp_path / f"{tag}.sr"
        plain.write_bytes(os.urandom(70_000) + tag.encode())
        assert cli("fs", "encrypt", str(plain), "-o", str(enc), "--volume", str(vol), "--passphrase-file", pw).returncode == 0
        backups.append((enc, plain.read_bytes()))

    backup("before")
    for i in range(2):
        r = cli("fs", "rotate", str(vol), "--passphrase-file", pw)
        assert r.returncode == 0, r.stderr
        keks.append(config.VolumeConfig.load(vol).unlock_passphrase(PASSPHRASE).kek)
        backup(f"after-rotation-{i + 1}")
    r = cli("fs", "reencrypt", str(vol), "--passphrase-file", pw)
    assert r.returncode == 0, r.stderr
    for enc, plain in backups:
        r = cli("fs", "decrypt", str(enc), "-o", "-", "--volume", str(vol), "--passphrase-file", pw)
        assert r.returncode == 0 and r.stdout == plain, (enc.name, r.stderr)
    cfg = config.VolumeConfig.load(vol)
    assert len(set(keks)) == 3 and cfg.retired_keks(keks[-1]) == [keks[1], keks[0]]
    for retired in keks[:-1]:
        with pytest.raises(config.ConfigError):
            cfg.unlock_with_kek(retired)
        with pytest.raises(config.ConfigError):
            cfg.retired_keks(retired)
        for raw in _lower_headers(vol):
            with pytest.raises(content.DamagedFile):
                content.FileHeader.decode(raw, retired, cfg.volume_id)
    # a damaged standalone file still fails as damage, after every KEK was tried
    enc, _ = backups[0]
    data = bytearray(enc.read_bytes())
    data[-100] ^= 1
    enc.write_bytes(bytes(data))
    r = cli("fs", "decrypt", str(enc), "-o", "-", "--volume", str(vol), "--passphrase-file", pw)
    assert r.returncode != 0 and b"damaged" in r.stderr
