"""Saving a client profile: a new directory, an existing one, modes, and what loads back."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from strongroom.client.profile import Profile
from strongroom.crypto.identity import Identity

pytestmark = pytest.mark.unit  # the fast tier: no root, FUSE, PostgreSQL or server process


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_new_profile_directory(tmp_path: Path) -> None:
    d = tmp_path / "a" / "b" / "profile"  # parents made too
    ident = Identity.generate()
    Profile(d, ["https://h:1"], "c_AAAAAAAAAAAAAAAA", ident, "n", "org").save(b"CA PEM\n")
    assert _mode(d) == 0o700
    assert {f.name for f in d.iterdir()} == {"ca.pem", "identity.key", "profile.json"}  # no temporaries left
    assert all(_mode(f) == 0o600 for f in d.iterdir())
    loaded = Profile.load(d)
    assert loaded.client_id == "c_AAAAAAAAAAAAAAAA" and loaded.servers == ["https://h:1"] and loaded.org == "org"
    assert loaded.identity.public_bytes() == ident.public_bytes()
    assert (d / "ca.pem").read_bytes() == b"CA PEM\n"


def test_existing_directory_is_replaced_file_by_file(tmp_path: Path) -> None:
    d = tmp_path / "profile"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)  # noqa: S103 - the loose mode save must tighten
    (d / "profile.json").write_text("stale")
    Profile(d, ["https://h:1"], "c_AAAAAAAAAAAAAAAA", Identity.generate()).save(None)
    assert _mode(d) == 0o700  # tightened
    second = Identity.generate()
    Profile(d, ["https://h:2"], "c_BBBBBBBBBBBBBBBB", second).save(b"CA\n")
    loaded = Profile.load(d)
    assert loaded.client_id == "c_BBBBBBBBBBBBBBBB" and loaded.servers == ["https://h:2"]
    assert loaded.identity.public_bytes() == second.public_bytes()
    assert {f.name for f in d.iterdir()} == {"ca.pem", "identity.key", "profile.json"}
    assert all(_mode(f) == 0o600 for f in d.iterdir())
