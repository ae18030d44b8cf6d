"""Version-4 volumes keep working: a whole v4 volume as the release that wrote v4 made it
(tests/fs/fixtures/v4.tar, made once by make_fixtures.py v4) mounts and reads exactly as it did
then, and fsck finds it clean.  Later releases must keep this test as it is."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from strongroom.fs import config
from tests.fs.make_fixtures import _manifest
from tests.fs.mounts import PASSPHRASE, Mount
from tests.serverproc import cli

FIXTURES = Path(__file__).with_name("fixtures")


def test_a_version_4_volume_reads_as_it_was_written(tmp_path: Path) -> None:
    want = json.loads((FIXTURES / "v4.json").read_text())
    assert want["passphrase"] == PASSPHRASE
    m = Mount(tmp_path)
    m.lower.mkdir()
    untar = ["tar", "--xattrs", "--xattrs-include=user.*", "--numeric-owner", "-xpf", str(FIXTURES / "v4.tar")]
    subprocess.run([*untar, "-C", str(m.lower)], check=True)
    assert config.VolumeConfig.load(m.lower).version == 4
    r = cli("fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0 and b"clean" in r.stdout, r.stdout
    m.start()
    try:
        assert _manifest(m.mnt) == want["plaintext"]
    finally:
        m.stop()
