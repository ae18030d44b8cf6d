"""`strongroom fs fsck` on a volume kept broken on purpose (tests/fs/fixtures/broken, made by
make_fixtures.py), on a clean volume, and when it cannot check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.fs.mounts import Mount
from tests.serverproc import cli

BROKEN = Path(__file__).with_name("fixtures") / "broken"


def test_broken_fixture_reports_each_damage(tmp_path: Path) -> None:
    vol = tmp_path / "broken"
    shutil.copytree(BROKEN, vol, symlinks=True)
    pw = tmp_path / "pw"
    pw.write_text("fixture passphrase")
    r = cli("fs", "fsck", str(vol), "--passphrase-file", str(pw), "--json")
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    problems = {(p["plain"], p["what"]) for p in report["problems"] if p["damage"]}
    assert ("/docs/damaged-block.bin", "block 2 does not authenticate") in problems
    assert ("/damaged-header.bin", "header: header does not authenticate: the whole file is unreadable") in problems
    assert any(p["plain"] is None and "does not decrypt" in p["what"] for p in report["problems"])
    plain_ok = {p["plain"] for p in report["problems"]}
    assert "/docs/fine.txt" not in plain_ok and "/link" not in plain_ok and "/" + "long-name-" * 20 not in plain_ok
    assert report["files"] == 5 and report["symlinks"] == 1 and not report["clean"]
    human = cli("fs", "fsck", str(vol), "--passphrase-file", str(pw)).stdout.decode()
    assert "damaged: /docs/damaged-block.bin" in human and human.strip().endswith("problem(s)")


def test_clean_volume_and_cannot_check(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start()
    (m.mnt / "d").mkdir()
    (m.mnt / "d" / "f").write_bytes(b"x" * 100_000)
    (m.mnt / ("n" * 200)).write_text("long")
    m.stop()
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0 and b"clean" in r.stdout, r.stdout
    bad = tmp_path / "bad"
    bad.write_text("wrong")
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(bad))
    assert r.returncode == 2 and r.stderr.decode().strip() == "strongroom: error: cannot check: wrong passphrase"
    r = cli("fs", "fsck", str(tmp_path / "nothing"), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 2 and b"cannot check" in r.stderr
    (m.lower / "strongroom.diriv").unlink()
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 1 and b"directory tweak unreadable" in r.stdout


def test_cat_reads_one_file_offline_and_stops_at_damage(tmp_path: Path) -> None:
    vol = tmp_path / "broken"
    shutil.copytree(BROKEN, vol, symlinks=True)
    pw = tmp_path / "pw"
    pw.write_text("fixture passphrase")
    r = cli("fs", "cat", str(vol / "docs" / "fine.txt"), "--passphrase-file", str(pw))
    assert r.returncode == 0 and r.stdout == b"fine\n" * 2000
    r = cli("fs", "cat", str(vol / "docs" / "damaged-block.bin"), "--passphrase-file", str(pw))
    assert r.returncode == 1 and r.stdout == bytes(range(256)) * 32  # the two good blocks before the bad one
    assert (
        r.stderr.decode().strip() == "strongroom: error: /docs/damaged-block.bin: Input/output error at byte 8192 (run fs fsck)"
    )
    r = cli("fs", "cat", str(vol / "missing"), "--passphrase-file", str(pw))
    assert r.returncode == 1 and b"No such file" in r.stderr
