"""fs/resolver.py: plaintext paths to lower ones, and its caches."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strongroom.fs import names
from strongroom.fs.beneath import Beneath
from strongroom.fs.resolver import Resolver

pytestmark = pytest.mark.unit


class CountingCipher(names.NameCipher):
    def __init__(self) -> None:
        super().__init__(os.urandom(64))
        self.decrypted = 0

    def decrypt(self, encrypted: str, diriv: bytes) -> bytes:
        self.decrypted += 1
        return super().decrypt(encrypted, diriv)


def _resolver(root: Path) -> tuple[Resolver, CountingCipher, bytes]:
    iv = names.new_diriv()
    (root / names.DIRIV).write_bytes(iv)
    cipher = CountingCipher()
    return Resolver(str(root), cipher, names.Tweaks(4), lambda *_: None, Beneath(str(root))), cipher, iv


def test_a_name_made_here_lists_without_decrypting_and_others_still_decrypt(tmp_path: Path) -> None:
    r, cipher, iv = _resolver(tmp_path)
    for leaf in ("short", "long-" + "x" * 200):
        _, _, lower, full = r.locate("/" + leaf)
        assert r.plain(full or lower, iv, long=full is not None) == leaf.encode()
    assert cipher.decrypted == 0
    other = cipher.encrypt(b"made elsewhere", iv)
    assert r.plain(other, iv) == b"made elsewhere"
    assert r.plain(other, iv) == b"made elsewhere"
    assert cipher.decrypted == 1  # once, then from the cache


def test_a_cached_name_is_no_excuse_for_a_bad_spelling_or_another_directory(tmp_path: Path) -> None:
    r, cipher, iv = _resolver(tmp_path)
    _, _, lower, _ = r.locate("/x")
    with pytest.raises(names.BadName):
        r.plain(lower + "=", iv)  # a second spelling of the same bytes
    with pytest.raises(names.BadName):
        r.plain(lower, names.new_diriv())  # the same name moved into another directory
