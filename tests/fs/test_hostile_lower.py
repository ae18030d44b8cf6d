"""Someone who can write the lower directory plants things where the volume keeps its own small
files: a directory tweak or a long-name sidecar that is a symlink (to /dev/zero, to a FIFO), a
FIFO, a device node or oversized; a config that is a FIFO or a symlink, or asks for absurd KDF
costs.  Nothing may hang or read without bound: that directory answers EIO with a log line, the
others keep working, fsck names it and finishes, and the tools refuse clearly."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from strongroom.fs import config, names
from tests.fs.mounts import Mount
from tests.serverproc import cli


def _symlink_zero(p: Path) -> None:
    os.symlink("/dev/zero", p)


def _symlink_fifo(p: Path) -> None:
    os.mkfifo(p.with_name("planted-fifo"))
    os.symlink(p.with_name("planted-fifo"), p)


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _device(p: Path) -> None:
    os.mknod(p, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers


def _oversized(p: Path) -> None:
    p.write_bytes(b"x" * (5 << 20))  # over every limit: a config may be 1 MiB, rules 4 MiB


PLANTS: dict[str, Callable[[Path], None]] = {
    "symlink-to-dev-zero": _symlink_zero,
    "symlink-to-fifo": _symlink_fifo,
    "fifo": _fifo,
    "device": _device,
    "oversized": _oversized,
}


def _fsck(m: Mount) -> subprocess.CompletedProcess[bytes]:
    return cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile), timeout=120)


def _lower_dir(m: Mount, plain: str) -> Path:
    iv = (m.lower / names.DIRIV).read_bytes()[: names.DIRIV_BYTES]
    return m.lower / m.name_cipher().lower_name(plain.encode(), iv)[0]


@pytest.mark.parametrize("plant", list(PLANTS), ids=list(PLANTS))
def test_a_planted_directory_tweak_is_eio_for_that_directory_alone(tmp_path: Path, plant: str) -> None:
    m = Mount(tmp_path).init().start()
    try:
        for d in ("bad", "good"):
            (m.mnt / d).mkdir()
            (m.mnt / d / "f").write_text(d)
        m.stop()
        PLANTS[plant](_lower_dir(m, "bad") / names.DIRIV)
        m.start()
        with pytest.raises(OSError) as e:
            os.listdir(m.mnt / "bad")
        assert e.value.errno == errno.EIO
        assert (m.mnt / "good" / "f").read_text() == "good"
        assert sorted(os.listdir(m.mnt)) == ["bad", "good"]
        m.stop()
        assert "directory tweak unreadable" in m.log.read_text()
        r = _fsck(m)
        assert r.returncode == 1, r.stdout + r.stderr
        assert b"directory tweak unreadable" in r.stdout
    finally:
        m.stop()


@pytest.mark.parametrize("plant", ["symlink-to-fifo", "fifo", "device", "oversized"])
def test_a_planted_long_name_sidecar_is_that_entry_alone(tmp_path: Path, plant: str) -> None:
    long_a, long_b = "a" * 200, "b" * 200
    m = Mount(tmp_path).init().start()
    try:
        (m.mnt / long_a).write_text("A")
        (m.mnt / long_b).write_text("B")
        (m.mnt / "short").write_text("S")
        m.stop()
        iv = (m.lower / names.DIRIV).read_bytes()[: names.DIRIV_BYTES]
        lower_a = m.name_cipher().lower_name(long_a.encode(), iv)[0]
        sidecar = m.lower / (lower_a + names.LONG_SUFFIX)
        sidecar.unlink()
        PLANTS[plant](sidecar)
        m.start()
        assert sorted(os.listdir(m.mnt)) == sorted([long_b, "short"])  # the planted one left out
        assert (m.mnt / long_b).read_text() == "B"
        m.stop()
        r = _fsck(m)
        assert r.returncode == 1 and b"not read" in r.stdout, r.stdout + r.stderr
    finally:
        m.stop()


@pytest.mark.parametrize("plant", ["symlink-to-fifo", "fifo", "symlink-to-dev-zero", "oversized"])
def test_a_planted_config_is_refused_at_once(tmp_path: Path, plant: str) -> None:
    m = Mount(tmp_path).init()
    cfg = m.lower / config.CONFIG
    kept = cfg.read_bytes()
    cfg.unlink()
    PLANTS[plant](cfg)
    for args in (["fs", "mount", str(m.lower), str(m.mnt), "--foreground"], ["fs", "fsck", str(m.lower)]):
        r = cli(*args, "--passphrase-file", str(m.pwfile), timeout=60)
        assert r.returncode != 0 and b"Traceback" not in r.stderr
        assert b"refused" in r.stderr or b"not read" in r.stderr, r.stderr
    cfg.unlink()
    cfg.write_bytes(kept)


@pytest.mark.parametrize(
    "field,value",
    [("memory_kib", 1 << 30), ("iterations", 10**9), ("lanes", 10**6), ("memory_kib", "٣٣"), ("iterations", True), ("lanes", 0)],
)
def test_kdf_parameters_out_of_bounds_are_refused_before_any_work(tmp_path: Path, field: str, value: object) -> None:
    m = Mount(tmp_path).init()
    raw = json.loads((m.lower / config.CONFIG).read_text())
    raw["key_sources"][0]["kdf"][field] = value
    raw["checksum"] = config._checksum(raw)  # an attacker recomputes the unkeyed checksum
    (m.lower / config.CONFIG).write_text(json.dumps(raw))
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile), timeout=30)
    assert r.returncode != 0 and b"Traceback" not in r.stderr
    assert b"Argon2id" in r.stderr and b"refused" in r.stderr, r.stderr


def test_rotate_and_reencrypt_refuse_a_volume_mounted_under_another_name(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start()
    try:
        (m.mnt / "f").write_text("x")
        other = tmp_path / "bound"
        other.mkdir()
        subprocess.run(["mount", "--bind", str(m.lower), str(other)], check=True)
        link = tmp_path / "link"
        link.symlink_to(m.lower)
        try:
            for name in (other, link):
                for cmd in ("rotate", "reencrypt"):
                    r = cli("fs", cmd, str(name), "--passphrase-file", str(m.pwfile), timeout=60)
                    assert r.returncode != 0 and (b"in use" in r.stderr or b"mounted" in r.stderr), (cmd, name, r.stderr)
        finally:
            subprocess.run(["umount", str(other)], check=False)
        assert (m.mnt / "f").read_text() == "x"
        m.stop()
        r = cli("fs", "rotate", str(m.lower), "--passphrase-file", str(m.pwfile), timeout=60)
        assert r.returncode == 0, r.stderr
    finally:
        m.stop()


def test_move_carries_special_files_over_without_opening_them(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start()
    try:
        src = tmp_path / "app"
        src.mkdir()
        (src / "data").write_text("rows")
        os.mkfifo(src / "pipe")
        os.mknod(src / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        r = cli("fs", "move", str(src), str(m.mnt), timeout=60)
        assert r.returncode == 0, r.stderr
        assert stat.S_ISFIFO((m.mnt / "app" / "pipe").lstat().st_mode)
        assert (m.mnt / "app" / "data").read_text() == "rows"
        assert src.is_symlink()
    finally:
        m.stop()


def test_sidecar_reader_never_blocks_on_a_fifo_without_a_writer(tmp_path: Path) -> None:
    code = (
        "import os,sys; from strongroom.fs import sidecar; os.mkfifo(sys.argv[1]);\n"
        "try: sidecar.read_bounded(sys.argv[1], 16)\nexcept sidecar.UnsafeFile as e: print(e.why)"
    )
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p")], capture_output=True, text=True, timeout=20)
    assert r.stdout.strip() == "is a FIFO", r.stderr


def test_a_planted_journal_is_never_followed(tmp_path: Path) -> None:
    """strongroom.journal as a symlink to another directory: the replay reads and removes nothing
    there, the mount says so, fsck names it; a name that is no record of the journal is left."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("keep me")
    m = Mount(tmp_path).init().start()
    try:
        (m.mnt / "f").write_text("data")
        m.stop()
        (m.lower / "strongroom.journal").symlink_to(elsewhere)
        m.start()
        assert (m.mnt / "f").read_text() == "data"
        m.stop()
        assert (elsewhere / "precious").read_text() == "keep me"
        assert "strongroom.journal: " in m.log.read_text()
        r = _fsck(m)
        assert r.returncode == 1 and b"shrink journal is not a directory" in r.stdout, r.stdout
        (m.lower / "strongroom.journal").unlink()
        (m.lower / "strongroom.journal").mkdir()
        (m.lower / "strongroom.journal" / "not-a-record-name").write_text("x")
        m.start()
        m.stop()
        assert (m.lower / "strongroom.journal" / "not-a-record-name").exists()
    finally:
        m.stop()
