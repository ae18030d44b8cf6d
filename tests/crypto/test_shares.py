"""Unseal shares: the published SLIP-39 vectors through the library we build on, and our
wrapper's promises (any threshold-sized subset gives the key back, fewer never; every mistyped
word is caught; no share's words in a message)."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from shamir_mnemonic import MnemonicError, combine_mnemonics
from shamir_mnemonic.wordlist import WORDLIST

from strongroom.crypto import shares

VECTORS = json.loads((Path(__file__).parent / "vectors" / "slip39.json").read_text())["vectors"]


@pytest.mark.parametrize("case", VECTORS, ids=[v[0].split(".")[0] for v in VECTORS])
def test_published_vectors(case: list) -> None:
    _name, mnemonics, secret_hex = case
    if secret_hex:
        assert combine_mnemonics(mnemonics, b"TREZOR").hex() == secret_hex
    else:
        with pytest.raises(MnemonicError):
            combine_mnemonics(mnemonics, b"TREZOR")


def _leaks(message: str, share: str) -> bool:
    """Whether the message carries any two consecutive words of the share (a single common
    word such as "check" may be both a share word and a word of the message)."""
    words = share.split()
    return any(f"{a} {b}" in message for a, b in zip(words, words[1:], strict=False))


def test_a_published_bad_checksum_is_a_share_error_without_the_words() -> None:
    bad = next(v for v in VECTORS if "invalid checksum (256" in v[0])[1][0]
    with pytest.raises(shares.ShareError) as e:
        shares.parse(bad)
    assert "checksum" in str(e.value)
    assert not _leaks(str(e.value), bad)


@settings(max_examples=25, deadline=None)
@given(hs.integers(2, 6).flatmap(lambda n: hs.tuples(hs.just(n), hs.integers(2, n))), hs.binary(min_size=32, max_size=32))
def test_every_threshold_subset_gives_the_key_and_fewer_never(nm: tuple[int, int], key: bytes) -> None:
    n, m = nm
    made = shares.split(key, n, m)
    assert len(made) == n and len(set(made)) == n
    for subset in itertools.combinations(made, m):
        assert shares.combine(list(subset)) == key
    with pytest.raises(shares.ShareError, match="needed"):
        shares.combine(made[: m - 1])
    info = [shares.parse(s) for s in made]
    assert {i.threshold for i in info} == {m} and len({i.identifier for i in info}) == 1
    assert sorted(i.index for i in info) == list(range(n))


def test_one_of_one() -> None:
    key = os.urandom(32)
    (only,) = shares.split(key, 1, 1)
    assert shares.combine([only]) == key


@pytest.mark.parametrize(("n", "m"), [(3, 1), (2, 3), (17, 2), (0, 0), (3, 0)])
def test_counts_refused(n: int, m: int) -> None:
    with pytest.raises(shares.ShareError):
        shares.split(os.urandom(32), n, m)


def test_every_single_word_substitution_is_caught() -> None:
    """RS1024 guarantees it; checked here for one share, every position, a few substitutes each."""
    made = shares.split(os.urandom(32), 3, 2)
    words = made[0].split()
    for pos in range(len(words)):
        for sub in (WORDLIST[(WORDLIST.index(words[pos]) + k) % len(WORDLIST)] for k in (1, 7, 511)):
            typo = " ".join(words[:pos] + [sub] + words[pos + 1 :])
            with pytest.raises(shares.ShareError, match="checksum"):
                shares.parse(typo)


def test_mistyped_and_malformed_shares() -> None:
    made = shares.split(os.urandom(32), 3, 2)
    words = made[1].split()
    cases = {
        " ".join(words[:5] + ["zzzz"] + words[6:]): "word 6",
        " ".join(words[:-1]): "33 words",
        " ".join(words[:10] + [words[11], words[10]] + words[12:]): "checksum",
        "": "empty",
        "a" * 2000: "over",
    }
    for text, want in cases.items():
        with pytest.raises(shares.ShareError, match=want) as e:
            shares.parse(text)
        assert not _leaks(str(e.value), made[1]) and not _leaks(str(e.value), text)


def test_pasted_share_spacing_and_case_are_forgiven() -> None:
    key = os.urandom(32)
    a, b, _ = shares.split(key, 3, 2)
    messy = "  " + a.upper().replace(" ", "\n", 5).replace(" ", "\t", 2) + "\r\n"
    assert shares.combine([messy, b]) == key


def test_shares_of_two_splits_and_repeats_are_refused() -> None:
    a = shares.split(os.urandom(32), 3, 2)
    b = shares.split(os.urandom(32), 3, 2)
    with pytest.raises(shares.ShareError, match="different splits|do not combine"):
        shares.combine([a[0], b[1]])
    with pytest.raises(shares.ShareError, match="twice"):
        shares.combine([a[0], a[0]])
