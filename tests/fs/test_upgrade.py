"""`strongroom fs upgrade`: a version-4 volume made by the release that wrote v4 (the fixture of
test_v4_fixture.py) moved to version 5 in place, read back entry by entry, fsck clean; killed
at every point of the pass and resumed; a torn header rewrite undone from its journal record."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

from strongroom.fs import config, content, names, upgrade
from tests.fs.make_fixtures import _manifest
from tests.fs.mounts import PASSPHRASE, Mount, lower_digest
from tests.serverproc import cli

FIXTURES = Path(__file__).with_name("fixtures")

KILL_AFTER = """
import os, signal, sys
from pathlib import Path
from strongroom.fs import config, upgrade
vol, n = Path(sys.argv[1]), int(sys.argv[2])
cfg = config.VolumeConfig.load(vol)
seen = [0]
def progress(k):
    seen[0] += k
    if seen[0] >= n:
        os.kill(os.getpid(), signal.SIGKILL)
renew = lambda s, kek: config.passphrase_source(kek, cfg.volume_id, sys.argv[3], s["role"])
upgrade.upgrade(vol, lambda s: config.passphrase_source_key(s, sys.argv[3], cfg.version), progress, renew)
"""


def _v4(tmp_path: Path) -> Mount:
    m = Mount(tmp_path)
    m.lower.mkdir()
    untar = ["tar", "--xattrs", "--xattrs-include=user.*", "--numeric-owner", "-xpf", str(FIXTURES / "v4.tar")]
    subprocess.run([*untar, "-C", str(m.lower)], check=True)
    assert config.VolumeConfig.load(m.lower).version == 4
    return m


def _headers(lower: Path) -> list[bytes]:
    out = []
    for d, _, files in os.walk(lower):
        for n in files:
            p = Path(d) / n
            if not n.startswith("strongroom.") and not p.is_symlink() and p.stat().st_size:
                out.append(p.read_bytes()[:8])
    return out


def _reads_as_written(m: Mount) -> None:
    want = json.loads((FIXTURES / "v4.json").read_text())["plaintext"]
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0 and b"clean" in r.stdout, r.stdout
    m.start()
    try:
        assert _manifest(m.mnt) == want
        (m.mnt / "after-upgrade").mkdir()  # and it is writable as a version-5 volume
        (m.mnt / "after-upgrade" / "f").write_text("new")
    finally:
        m.stop()
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0 and b"clean" in r.stdout, r.stdout


def test_upgrade_moves_a_version_4_volume_to_version_5(tmp_path: Path) -> None:
    m = _v4(tmp_path)
    before = {p.relative_to(m.lower) for p in m.lower.rglob("*") if not p.name.startswith("strongroom.")}
    r = cli("fs", "upgrade", str(m.lower), "--passphrase-file", str(m.pwfile), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["headers"] > 0 and out["directories"] > 0 and out["symlinks"] == 1 and out["attributes"] >= 3, out
    cfg = config.VolumeConfig.load(m.lower)
    assert cfg.version == 5 and "dir-ids" in cfg.wrapped
    assert not (m.lower / upgrade.STAGED).exists() and not (m.lower / upgrade.JOURNAL).exists()
    assert {h[4:8] for h in _headers(m.lower)} == {b"\x00\x02\x00\x01"}  # version 2, kind: file content
    dirs = [m.lower, *(p for p in m.lower.rglob("*") if p.is_dir() and not p.is_symlink() and p.name != "strongroom.journal")]
    assert all((d / names.DIRIV).stat().st_size == 32 for d in dirs)
    after = {p.relative_to(m.lower) for p in m.lower.rglob("*") if not p.name.startswith("strongroom.")}
    assert after == before  # no lower entry renamed, added or lost
    r = cli("fs", "upgrade", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0 and b"already" in r.stdout
    _reads_as_written(m)


def test_an_interrupted_upgrade_resumes_and_no_mount_starts_meanwhile(tmp_path: Path) -> None:
    m = _v4(tmp_path)
    n, kills = 1, 0
    while True:
        p = subprocess.run([sys.executable, "-c", KILL_AFTER, str(m.lower), str(n), PASSPHRASE], capture_output=True)
        if p.returncode == 0:
            break
        assert p.returncode == -9, p.stderr
        kills += 1
        r = cli("fs", "mount", str(m.lower), str(m.mnt), "--passphrase-file", str(m.pwfile))
        assert r.returncode != 0 and b"fs upgrade" in r.stderr, r.stderr
        n += 3
    assert kills >= 3
    assert config.VolumeConfig.load(m.lower).version == 5
    _reads_as_written(m)


def test_a_torn_header_rewrite_is_undone_from_the_journal(tmp_path: Path) -> None:
    m = _v4(tmp_path)
    p = subprocess.run([sys.executable, "-c", KILL_AFTER, str(m.lower), "1", PASSPHRASE], capture_output=True)
    assert p.returncode == -9, p.stderr
    assert (m.lower / upgrade.STAGED).exists()
    old = [
        f
        for f in m.lower.rglob("*")
        if f.is_file() and not f.is_symlink() and not f.name.startswith("strongroom.") and f.stat().st_size
    ]
    old = [f for f in old if f.read_bytes()[4:8] == b"\x00\x01\x00\x00"]
    assert old, "the pass should have left version-1 headers behind"
    victim = old[0]
    header = victim.read_bytes()[: content.HEADER]
    with open(m.lower / upgrade.JOURNAL, "a") as j:  # recorded, then the write tore
        j.write(json.dumps({"ino": victim.stat().st_ino, "header": base64.urlsafe_b64encode(header).decode()}) + "\n")
    with open(victim, "r+b") as f:
        f.seek(4)
        f.write(b"\x00\x02\x00\x01" + header[8:40] + os.urandom(44))  # half new, half garbage
    r = cli("fs", "upgrade", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0, r.stderr
    _reads_as_written(m)


def test_a_damaged_volume_is_refused_and_left_untouched(tmp_path: Path) -> None:
    """Every object is read before anything is written: a header that does not authenticate
    stops the upgrade with one line, and the volume stays a working version-4 volume."""
    m = _v4(tmp_path)
    victim = max(
        (p for p in m.lower.rglob("*") if p.is_file() and not p.name.startswith("strongroom.")), key=lambda p: p.stat().st_size
    )
    with open(victim, "r+b") as f:
        f.seek(40)
        byte = f.read(1)
        f.seek(40)
        f.write(bytes([byte[0] ^ 1]))
    before = lower_digest(m.lower)
    r = cli("fs", "upgrade", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and b"fsck" in r.stderr, r.stderr
    assert lower_digest(m.lower) == before and config.VolumeConfig.load(m.lower).version == 4
    m.start()  # still mounts as it was
    m.stop()


def test_a_planted_or_damaged_staged_config_is_one_clear_line(tmp_path: Path) -> None:
    """The staged config as a FIFO or as garbage: one line, exit non-zero, never a hang."""
    m = _v4(tmp_path)
    staged = m.lower / upgrade.STAGED
    for plant in ("fifo", "garbage"):
        if plant == "fifo":
            os.mkfifo(staged)
        else:
            staged.write_text("{not json")
        r = cli("fs", "upgrade", str(m.lower), "--passphrase-file", str(m.pwfile), timeout=60)
        assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and upgrade.STAGED.encode() in r.stderr, r.stderr
        staged.unlink()
