"""Unseal shares: a random 32-byte key split M of N with Shamir's scheme over GF(256).

Each share is a SLIP-39 mnemonic made by ``shamir-mnemonic``, SatoshiLabs' reference
implementation (published test vectors: tests/crypto/vectors/slip39.json): 33 words from a
1,024-word list whose first four letters are unique, an RS1024 checksum that is certain to catch
up to three mistyped words, a 15-bit identifier that ties the shares of one split together, and
a digest inside the shared value that catches a set of shares that combines to the wrong key.
The mnemonic's own passphrase is left empty: the shared key is random, so there is nothing to
stretch.

Nothing here puts a share's words into an exception message: a mistyped share still holds
most of a secret.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from shamir_mnemonic import MnemonicError, combine_mnemonics, generate_mnemonics
from shamir_mnemonic.share import Share
from shamir_mnemonic.wordlist import WORD_INDEX_MAP

KEY_LEN = 32
MAX_SHARES = 16  # SLIP-39's bound on the members of one group
MAX_TEXT = 1024  # 33 words of at most 8 letters, with generous room for spacing


class ShareError(ValueError):
    """A share that cannot be used, with a message fit to show the person who typed it."""


@dataclass(frozen=True)
class ShareInfo:
    """What a share says about itself (none of it secret): which split it belongs to, its
    place in it, and how many shares that split needs."""

    identifier: int
    index: int  # 0-based member index; shown to people 1-based
    threshold: int
    text: str  # normalized: lower case, single spaces


def check_counts(shares: int, threshold: int) -> None:
    if not 1 <= threshold <= shares <= MAX_SHARES:
        raise ShareError(f"need 1 <= threshold <= shares <= {MAX_SHARES} (got {threshold} of {shares})")
    if threshold == 1 and shares > 1:
        raise ShareError("a threshold of 1 with several shares makes every share the whole key: use 1 of 1 or a threshold of 2+")


def split(key: bytes, shares: int, threshold: int) -> list[str]:
    """``shares`` mnemonics, any ``threshold`` of which give back ``key`` (32 bytes)."""
    if len(key) != KEY_LEN:
        raise ValueError("the key to split must be 32 bytes")
    check_counts(shares, threshold)
    groups = generate_mnemonics(1, [(threshold, shares)], key, b"", extendable=True, iteration_exponent=0)
    return list(groups[0])


def normalize(text: str) -> str:
    """Lower case, NFKC, words separated by single spaces; a line break or a tab between words
    (as a share pasted from a printout carries) is a space."""
    if len(text) > MAX_TEXT:
        raise ShareError(f"a share is 33 words; this text is over {MAX_TEXT} characters")
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def parse(text: str) -> ShareInfo:
    """A share checked on its own: known words, its checksum, a 32-byte key, one group."""
    norm = normalize(text)
    words = norm.split(" ") if norm else []
    if not words:
        raise ShareError("empty share")
    for i, word in enumerate(words, 1):
        if word not in WORD_INDEX_MAP:
            raise ShareError(f"word {i} of the share is not a share word: check it against the printed share")
    if len(words) != 33:
        raise ShareError(f"a share has 33 words; this one has {len(words)}")
    try:
        share = Share.from_mnemonic(norm)
    except MnemonicError:
        # the checksum, or padding that no share made by split() has
        raise ShareError("the share's checksum does not match: a word is mistyped or missing, or two are swapped") from None
    if share.group_count != 1 or share.group_threshold != 1:
        raise ShareError("a share with several groups was not made by Strongroom")
    if share.iteration_exponent != 0:
        raise ShareError("this share was not made by Strongroom (another iteration count)")
    return ShareInfo(share.identifier, share.index, share.member_threshold, norm)


def combine(texts: list[str]) -> bytes:
    """The key from at least ``threshold`` shares of one split; ShareError if they do not agree
    (another split's share among them, a repeated share, too few) or do not combine."""
    infos = [parse(t) for t in texts]
    if len({i.identifier for i in infos}) > 1:
        raise ShareError("the shares come from different splits")
    if len({i.index for i in infos}) != len(infos):
        raise ShareError("the same share was given twice")
    if infos and len(infos) < infos[0].threshold:
        raise ShareError(f"{infos[0].threshold} shares are needed; {len(infos)} given")
    try:
        key = bytes(combine_mnemonics([i.text for i in infos], b""))
    except MnemonicError:
        raise ShareError("the shares do not combine: one of them is from another split or was altered") from None
    if len(key) != KEY_LEN:
        raise ShareError("these shares hold a key of another length: not a Strongroom unseal key")
    return key
