"""Lower names are decoded strictly (FORMAT.md §6): only canonical base64url, long names only with
a sidecar that hashes to them, and no decrypted name a writer could not have stored."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strongroom.fs import names
from tests.fs.mounts import Mount


@pytest.mark.parametrize("text", ["QQ=", "QQ==", "QR", "Q", "a+b/", "QQ\n", "Q Q", "é"])
def test_only_canonical_base64url_decodes(text: str) -> None:
    with pytest.raises(names.BadName):
        names.unb64u(text)


def test_canonical_base64url_round_trips() -> None:
    for data in (b"", b"A", b"AB", b"ABC", os.urandom(33)):
        assert names.unb64u(names.b64u(data)) == data


@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=", max_size=12))
def test_decoding_accepts_exactly_the_canonical_spellings(text: str) -> None:
    """Oracle: a text is canonical when encoding what it decodes to gives the text back."""
    try:
        canonical = names.b64u(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))) == text
    except ValueError:
        canonical = False
    if canonical:
        assert names.b64u(names.unb64u(text)) == text
    else:
        with pytest.raises(names.BadName):
            names.unb64u(text)


def test_a_second_spelling_or_an_impossible_name_is_not_listed(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start()
    (m.mnt / "x").write_text("only one")
    (m.mnt / ("long-" + "y" * 200)).write_text("long")
    m.stop()
    iv = (m.lower / names.DIRIV).read_bytes()[: names.DIRIV_BYTES]
    nc = m.name_cipher()
    short = m.lower / nc.lower_name(b"x", iv)[0]
    shutil.copy(short, str(short) + "=")  # the same bytes under a padded spelling
    siv = nc._siv
    for bad in (b".", b"..", b"a/b", b"nul\x00", b"z" * 256):  # authenticate, but no writer stores them
        lower = names.b64u(siv.encrypt(bad, [names.NAME_AD + iv]))
        (m.lower / (lower if len(lower) <= names.LONG_NAME_MAX else names.long_name(lower))).write_bytes(b"")
    long_lower, full = nc.lower_name(("long-" + "y" * 200).encode(), iv)
    assert full is not None
    sidecar = m.lower / (long_lower + names.LONG_SUFFIX)
    sidecar.write_text(full[:-2] + ("AA" if not full.endswith("AA") else "BA"))  # no longer hashes to its entry
    m.start()
    try:
        assert sorted(os.listdir(m.mnt)) == ["x"]
        assert (m.mnt / "x").read_text() == "only one"
    finally:
        m.stop()
    assert "name does not decrypt" in m.log.read_text() or "invalid file name" in m.log.read_text()


def _fsck(m: Mount) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strongroom.cli.main", "fs", "fsck", str(m.lower), "--passphrase-file", str(m.pwfile)],
        capture_output=True,
        text=True,
    )


def test_one_spelling_per_name(tmp_path: Path) -> None:
    """Made with file operations alone, no key: a short name written again in the long form (its
    sidecar holds the short form's text), and a long name written in the short form (the
    sidecar's text as the entry's name).  Each used to list a name twice, once unopenable, with
    fsck clean; now only the one spelling lists, and fsck names the other."""
    m = Mount(tmp_path).init().start()
    (m.mnt / "short").write_text("s")
    long_plain = "L" * 150  # encrypted: longer than long_name_max, shorter than NAME_MAX
    (m.mnt / long_plain).write_text("l")
    m.stop()
    fine = _fsck(m)
    assert fine.returncode == 0, fine.stdout + fine.stderr
    lower = {p.name: p for p in m.lower.iterdir()}
    short = next(n for n in lower if not n.startswith("strongroom."))
    shutil.copy(lower[short], m.lower / names.long_name(short))  # long form of a short name, same bytes
    (m.lower / (names.long_name(short) + names.LONG_SUFFIX)).write_text(short)
    sidecar = next(p for n, p in lower.items() if n.endswith(names.LONG_SUFFIX))
    full = sidecar.read_text()
    assert names.LONG_NAME_MAX < len(full) <= 255
    shutil.copy(m.lower / names.long_name(full), m.lower / full)  # short form of a long name, same bytes
    found = _fsck(m)
    assert found.returncode == 1, found.stdout + found.stderr
    assert "a short name written in the long form" in found.stdout + found.stderr
    assert "a long name written in the short form" in found.stdout + found.stderr
    m.start()
    try:
        assert sorted(os.listdir(m.mnt)) == sorted(["short", long_plain])
        assert (m.mnt / "short").read_text() == "s" and (m.mnt / long_plain).read_text() == "l"
    finally:
        m.stop()
