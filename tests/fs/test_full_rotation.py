"""`strongroom fs rotate --full` (FORMAT.md §2, §10): every key renewed -- afterwards every lower
name and every file header differs, each key of the config is new, the old KEK alone opens
nothing of the volume but the exports made before, and everything reads back as it was:
contents, holes, hard links, symlinks, FIFOs (the same inode), attributes, modes, the access
rules.  Killed at many points (building and swapping) and resumed, with no mount meanwhile."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from strongroom.fs import acl, config, content, fullrotate, names, standalone
from tests.fs.make_fixtures import _manifest
from tests.fs.mounts import PASSPHRASE, Mount, lower_digest
from tests.serverproc import cli

FIXTURES = Path(__file__).with_name("fixtures")

KILL_AFTER = """
import os, signal, sys
from pathlib import Path
from strongroom.fs import config, fullrotate
vol, n, where = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[4]
cfg = config.VolumeConfig.load(vol)
seen = [0]
def progress(k):
    seen[0] += k
    if where == "build" and seen[0] >= n:
        os.kill(os.getpid(), signal.SIGKILL)
if where == "swap":  # a crash between two steps of the swap (a fault no file operation makes)
    real = fullrotate._remac_rules
    def crash(*a):
        os.kill(os.getpid(), signal.SIGKILL)
    fullrotate._remac_rules = crash
fullrotate.rotate_full(vol, lambda s: config.passphrase_source_key(s, sys.argv[3], cfg.version), progress)
"""


def _volume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Mount, dict[str, object], bytes, bytes]:
    """The v4 fixture upgraded to v5, with access rules and an export made with its key; its
    manifest, the export and its plaintext."""
    # this host's record of the rules' serial, kept apart: other tests use the fixture's volume id
    monkeypatch.setenv("STRONGROOM_STATE_DIR", str(tmp_path / "host-state"))
    m = Mount(tmp_path)
    m.lower.mkdir()
    untar = ["tar", "--xattrs", "--xattrs-include=user.*", "--numeric-owner", "-xpf", str(FIXTURES / "v4.tar")]
    subprocess.run([*untar, "-C", str(m.lower)], check=True)
    assert cli("fs", "upgrade", str(m.lower), "--passphrase-file", str(m.pwfile)).returncode == 0
    vk = config.VolumeConfig.load(m.lower).unlock_passphrase(PASSPHRASE)
    acl.save_rules(m.lower, vk.rules_mac, acl.RuleSet("permissive", [acl.Rule("r1", "/usr/bin/cat", "0" * 64)]))
    m.start()
    try:
        os.setxattr(m.mnt, "user.on-root", b"root attribute")
        want = _manifest(m.mnt)
    finally:
        m.stop()
    out = io.BytesIO()
    secret = b"exported before the rotation\n" * 100
    standalone.encrypt_stream(io.BytesIO(secret), out, vk.volume_id, vk.kek, None, 1)
    return m, want, out.getvalue(), secret


def _lower(vol: Path) -> dict[str, bytes]:
    """Every lower entry of the tree (not the reserved names) -> its first 84 bytes ("" if not a file)."""
    out = {}
    for p in vol.rglob("*"):
        if p.name.startswith("strongroom.") and not names.is_long(p.name):
            continue
        is_file = p.is_file() and not p.is_symlink()
        out[str(p.relative_to(vol))] = p.read_bytes()[: content.HEADER] if is_file else b""
    return out


def _reads_back(m: Mount, want: dict[str, object], export: bytes, secret: bytes, old_kek: bytes) -> None:
    cfg = config.VolumeConfig.load(m.lower)
    vk = cfg.unlock_passphrase(PASSPHRASE)
    assert vk.kek != old_kek
    with pytest.raises(config.ConfigError):
        cfg.unlock_with_kek(old_kek)  # the old KEK opens no wrapped key
    out = io.BytesIO()
    standalone.decrypt_stream(io.BytesIO(export), out, lambda env: [vk.kek, *cfg.retired_keks(vk.kek)])
    assert out.getvalue() == secret  # exports made before stay readable through the ring
    assert acl.load_rules(m.lower, vk.rules_mac) is not None  # the rules, re-MAC'd
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0 and b"clean" in r.stdout, r.stdout
    m.start()
    try:
        assert _manifest(m.mnt) == want
    finally:
        m.stop()


def test_rotate_full_renews_every_key_and_reads_back_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m, want, export, secret = _volume(tmp_path, monkeypatch)
    old_cfg = config.VolumeConfig.load(m.lower)
    old = old_cfg.unlock_passphrase(PASSPHRASE)
    before = _lower(m.lower)
    fifo_ino = next(p.lstat().st_ino for p in m.lower.rglob("*") if stat.S_ISFIFO(p.lstat().st_mode))
    sparse_blocks = max(p.stat().st_blocks for p in m.lower.rglob("*") if p.is_file() and p.stat().st_size > (1 << 20))
    r = cli("fs", "rotate", "--full", str(m.lower), "--passphrase-file", str(m.pwfile), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["files"] > 0 and out["special"] == 1 and out["symlinks"] == 1, out
    after = _lower(m.lower)
    assert not set(before) & set(after)  # every lower name differs
    headers_before = {h for h in before.values() if h}
    assert headers_before and not headers_before & {h for h in after.values() if h}  # every header (and file id) differs
    assert {h[8:24] for h in headers_before}.isdisjoint({h[8:24] for h in after.values() if h})
    new = config.VolumeConfig.load(m.lower).unlock_passphrase(PASSPHRASE)
    for purpose in ("names", "xattr-names", "xattr-values", "rules-mac", "dir-ids"):
        assert new.by_purpose(purpose) != old.by_purpose(purpose), purpose
    assert new.kek != old.kek
    assert next(p.lstat().st_ino for p in m.lower.rglob("*") if stat.S_ISFIFO(p.lstat().st_mode)) == fifo_ino
    assert max(p.stat().st_blocks for p in m.lower.rglob("*") if p.is_file() and p.stat().st_size > (1 << 20)) <= sparse_blocks
    assert not (m.lower / fullrotate.STATE).exists() and not (m.lower / fullrotate.STAGE).exists()
    _reads_back(m, want, export, secret, old.kek)


def test_an_interrupted_full_rotation_resumes_and_no_mount_starts_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m, want, export, secret = _volume(tmp_path, monkeypatch)
    old_kek = config.VolumeConfig.load(m.lower).unlock_passphrase(PASSPHRASE).kek
    for n, where in [(1, "build"), (2, "build"), (3, "build"), (0, "swap")]:
        p = subprocess.run([sys.executable, "-c", KILL_AFTER, str(m.lower), str(n), PASSPHRASE, where], capture_output=True)
        assert p.returncode == -9, p.stderr
        state = json.loads((m.lower / fullrotate.STATE).read_text())
        assert state["phase"] == where  # killed while building, then between two steps of the swap
        r = cli("fs", "mount", str(m.lower), str(m.mnt), "--passphrase-file", str(m.pwfile))
        assert r.returncode != 0 and b"rotate --full" in r.stderr, r.stderr
    r = cli("fs", "rotate", "--full", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0, r.stderr
    _reads_back(m, want, export, secret, old_kek)


def test_a_damaged_block_stops_the_rotation_and_abort_gives_the_volume_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m, _want, _export, _secret = _volume(tmp_path, monkeypatch)
    victim = max(
        (p for p in m.lower.rglob("*") if p.is_file() and not p.name.startswith("strongroom.")), key=lambda p: p.stat().st_size
    )
    with open(victim, "r+b") as f:  # the last block of the largest file: damage only reading finds
        f.seek(-10, os.SEEK_END)
        byte = f.read(1)
        f.seek(-10, os.SEEK_END)
        f.write(bytes([byte[0] ^ 1]))
    before = lower_digest(m.lower)
    r = cli("fs", "rotate", "--full", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and b"--abort" in r.stderr, r.stderr
    r = cli("fs", "mount", str(m.lower), str(m.mnt), "--passphrase-file", str(m.pwfile))
    assert r.returncode != 0 and b"rotate --full" in r.stderr
    r = cli("fs", "rotate", "--full", "--abort", str(m.lower))
    assert r.returncode == 0 and b"forgotten" in r.stdout, r.stderr
    assert lower_digest(m.lower) == before  # as it was: the old tree and config were never changed
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 1, r.stdout  # the damage, named


def test_a_planted_or_damaged_state_file_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rotation's state file as a FIFO, as garbage, or as JSON of another shape: one line, exit
    non-zero, nothing touched (a FIFO is never opened for reading, so nothing hangs)."""
    m, _want, _export, _secret = _volume(tmp_path, monkeypatch)
    before = lower_digest(m.lower)
    state = m.lower / fullrotate.STATE
    for plant in ("fifo", "garbage", "shape"):
        if plant == "fifo":
            os.mkfifo(state)
        else:
            state.write_text("{not json" if plant == "garbage" else '{"phase": "later"}')
        r = cli("fs", "rotate", "--full", str(m.lower), "--passphrase-file", str(m.pwfile), timeout=60)
        assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and fullrotate.STATE.encode() in r.stderr, r.stderr
        state.unlink()
    assert lower_digest(m.lower) == before
