"""`fs move`: a plaintext directory into a mount, a symlink left behind; interrupted for real
(SIGKILL) and finished by a rerun with nothing lost or duplicated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fs.mounts import Mount
from tests.serverproc import cli


def _tree(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = ("-> " + os.readlink(p)) if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
    return out


def _make(src: Path, files: int, size: int) -> None:
    (src / "sub" / "deeper").mkdir(parents=True)
    for i in range(files):
        (src / ("sub" if i % 2 else "sub/deeper") / f"f{i}").write_bytes(os.urandom(size + i))
    os.symlink("sub/f1", src / "link")
    os.chmod(src / "sub" / "f1", 0o600)


def test_move_copies_verifies_and_leaves_a_symlink(vol: Mount, tmp_path: Path) -> None:
    src = tmp_path / "data"
    _make(src, 40, 10_000)
    expected = _tree(src)
    r = cli("fs", "move", str(src), str(vol.mnt / "data"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["files"] == 40
    assert src.is_symlink() and os.readlink(src) == str(vol.mnt / "data")
    assert _tree(src) == expected and _tree(vol.mnt / "data") == expected
    assert (vol.mnt / "data" / "sub" / "f1").stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "data.strongroom-moving").exists() and not (tmp_path / "data.strongroom-move.json").exists()
    r = cli("fs", "move", str(src), str(vol.mnt / "data"))
    assert r.returncode == 0 and b"already moved" in r.stdout
    r = cli("fs", "move", str(tmp_path), str(tmp_path / "elsewhere"))
    assert r.returncode == 1 and b"not inside a mounted Strongroom volume" in r.stderr


def test_interrupted_move_finishes_without_loss_or_duplicates(vol: Mount, tmp_path: Path) -> None:
    src = tmp_path / "big"
    _make(src, 60, 2_000_000)
    expected = _tree(src)
    proc = subprocess.Popen(
        [sys.executable, "-m", "strongroom.cli.main", "fs", "move", str(src), str(vol.mnt / "big")], stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    dest = vol.mnt / "big" / "sub"
    while (not dest.exists() or len(os.listdir(dest)) < 5) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert src.is_dir() and not src.is_symlink() and (tmp_path / "big.strongroom-move.json").exists()
    assert _tree(src) == expected  # the original is untouched
    r = cli("fs", "move", str(src), str(vol.mnt / "big"), "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["already_there"] > 0  # resumed, not restarted
    assert src.is_symlink() and _tree(vol.mnt / "big") == expected
    leftovers = [p for p in (vol.mnt / "big").rglob("*") if "strongroom-partial" in p.name]
    assert not leftovers
