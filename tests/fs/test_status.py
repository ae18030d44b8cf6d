"""`fs status`: what a mounted volume's daemon met that it did not expect, each kind logged once
per place and counted: a deleted root tweak, a missing long-name sidecar, a damaged block, rules
that fail their MAC."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from strongroom.fs import acl, names
from tests.fs.mounts import Mount
from tests.serverproc import cli


def _status(m: Mount) -> tuple[int, dict[str, dict[str, object]]]:
    time.sleep(1.2)  # the daemon writes its status at most once a second
    r = cli("fs", "status", str(m.mnt), "--json")
    return r.returncode, json.loads(r.stdout)["problems"] if r.stdout else {}


def test_fs_status_counts_each_unexpected_state(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start()
    try:
        assert _status(m) == (0, {})
        long_name = "n" * 200
        (m.mnt / long_name).write_text("x")
        (m.mnt / "f").write_bytes(os.urandom(10_000))
        (m.mnt / "d").mkdir()
        (m.mnt / "d" / "g").write_text("y")
        pw = ("--passphrase-file", str(m.pwfile))
        assert cli("acl", "add", str(m.mnt), "--allow", "/usr/bin/cat", "--mode", "r", *pw).returncode == 0
        assert cli("acl", "mode", str(m.mnt), "permissive", *pw).returncode == 0
        m.stop()
        iv = (m.lower / names.DIRIV).read_bytes()[: names.DIRIV_BYTES]
        cipher = m.name_cipher()
        lower_long = cipher.lower_name(long_name.encode(), iv)[0]
        (m.lower / (lower_long + names.LONG_SUFFIX)).unlink()
        with open(m.lower_of("f"), "r+b") as f:
            f.seek(6000)
            f.write(b"\x00" * 8)
        m.start()
        os.listdir(m.mnt)  # the long name is left out, and logged
        with pytest.raises(OSError):
            (m.mnt / "f").read_bytes()
        rules = m.lower / acl.RULES_FILE
        kept = rules.read_text()
        rules.write_text(kept.replace("permissive", "off"))  # without the key: its MAC fails
        time.sleep(acl.RELOAD_CHECK_S + 0.2)
        with pytest.raises(OSError):
            os.listdir(m.mnt / "d")
        code, problems = _status(m)
        assert code == 1
        assert problems["damaged block"]["count"] == 1 and "block 1" in str(problems["damaged block"]["first"])
        assert any(k.startswith("name does not decrypt") or "sidecar" in k for k in problems), problems
        assert problems["access rules refused"]["count"] >= 1
        m.stop()
        rules.write_text(kept)
        (m.lower / names.DIRIV).unlink()  # the root's tweak: nothing in the volume can be named
        m.start()
        with pytest.raises(OSError):
            os.listdir(m.mnt)
        code, problems = _status(m)
        assert problems["directory tweak missing"]["count"] == 1
        log = m.log.read_text()
        assert log.count("directory tweak missing") == 1  # logged once, however often met
    finally:
        m.stop()
    r = cli("fs", "status", str(m.mnt))
    assert r.returncode == 2 and b"not a mounted" in r.stderr
