"""Names (docs/FORMAT.md §6): AES-SIV under the name key with the directory's tweak, base64url;
long ones stored under a hash with the full encrypted name beside them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

DIRIV = "strongroom.diriv"
DIRIV_BYTES = 16
LONG_PREFIX = "strongroom.longname."
LONG_SUFFIX = ".name"
RESERVED = "strongroom."
LONG_NAME_MAX = 175
# The largest long-name sidecar: a 255-byte name, SIV-sealed (+16) and base64url-encoded.
LONG_SIDECAR_MAX = 4 * ((255 + 16 + 2) // 3)
NAME_AD = b"strongroom/v1/name\x00"
TWEAK_PREFIX = b"strongroom/v2/tweak\x00"
TWEAK_V5 = b"strongroom/v5/tweak\x00"
DIRIV_TAG_V5 = b"strongroom/v5/diriv\x00"
TAG_BYTES = 16


class BadName(ValueError):
    """A name that cannot be stored (plaintext) or does not decrypt (lower), or base64url that is
    not canonical."""


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


_B64U = re.compile(r"[A-Za-z0-9_-]*")
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
# The last character of a text whose length is 2 or 3 mod 4 carries 4 or 2 unused low bits: the
# canonical form has them zero, i.e. that character's value is a multiple of 16 or 4.
_CANONICAL_LAST = {0: None, 2: frozenset(_ALPHABET[::16]), 3: frozenset(_ALPHABET[::4])}


def unb64u(text: str) -> bytes:
    """Strict base64url without padding (FORMAT.md): only the canonical form of some bytes is
    accepted, so one lower name never has a second spelling (`X=` or an `X` whose unused low
    bits are set would otherwise decode to the same name)."""
    if not isinstance(text, str) or not _B64U.fullmatch(text) or len(text) % 4 == 1:
        raise BadName("not base64url")
    last = _CANONICAL_LAST[len(text) % 4]
    if last is not None and text[-1] not in last:
        raise BadName("not canonical base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_diriv() -> bytes:
    return os.urandom(DIRIV_BYTES)


def derived_diriv(parent: bytes, lower_name: str) -> bytes:
    """The tweak of a directory without a stored one (format version 2): a function of its
    parent's tweak and its own lower name, so it is durable the moment its entry is."""
    return hashlib.sha256(TWEAK_PREFIX + parent + lower_name.encode()).digest()[:DIRIV_BYTES]


class Tweaks:
    """The tweak rules of one format version (FORMAT.md §6).  From version 5 a derived tweak is
    keyed by the dir-ids key, and a stored one carries a tag binding it to where its directory
    is (its parent's tweak and its own lower name), so no tweak can be given to another
    directory without that key; two tags while a directory is being moved."""

    def __init__(self, version: int, dir_key: bytes = b"", volume_id: bytes = b"") -> None:
        self.derived = version >= 2  # version 1: every directory stores its tweak
        self.keyed = version >= 5
        self._key = dir_key
        self._volume_id = volume_id  # the root's "parent"
        self.stored_max = DIRIV_BYTES + 2 * TAG_BYTES if self.keyed else DIRIV_BYTES

    def derive(self, parent_iv: bytes, lower: str) -> bytes:
        if self.keyed:
            return hmac.digest(self._key, TWEAK_V5 + parent_iv + lower.encode(), "sha256")[:DIRIV_BYTES]
        return derived_diriv(parent_iv, lower)

    def _tag(self, parent_iv: bytes | None, iv: bytes, lower: str) -> bytes:
        place = self._volume_id if parent_iv is None else parent_iv
        return hmac.digest(self._key, DIRIV_TAG_V5 + place + iv + lower.encode(), "sha256")[:TAG_BYTES]

    def read(self, raw: bytes, parent_iv: bytes | None, lower: str) -> bytes:
        """The tweak a stored ``strongroom.diriv`` holds, for the directory ``lower`` in the one
        with tweak ``parent_iv`` (None: the root); BadName if it may not be used there."""
        if not self.keyed:
            if len(raw) != DIRIV_BYTES:
                raise BadName("directory tweak has the wrong size")
            return raw
        if len(raw) not in (DIRIV_BYTES + TAG_BYTES, DIRIV_BYTES + 2 * TAG_BYTES):
            raise BadName("directory tweak has the wrong size")
        iv, want = raw[:DIRIV_BYTES], self._tag(parent_iv, raw[:DIRIV_BYTES], lower)
        tags = [raw[i : i + TAG_BYTES] for i in range(DIRIV_BYTES, len(raw), TAG_BYTES)]
        if not any(hmac.compare_digest(t, want) for t in tags):
            raise BadName("directory tweak does not authenticate here (a moved, swapped or copied directory)")
        return iv

    def record(self, iv: bytes, parent_iv: bytes | None, lower: str, also: tuple[bytes, str] | None = None) -> bytes:
        """What ``strongroom.diriv`` holds for tweak ``iv`` at that place (and at ``also``)."""
        if not self.keyed:
            return iv
        return iv + self._tag(parent_iv, iv, lower) + (b"" if also is None else self._tag(also[0], iv, also[1]))


def check_plain(name: bytes) -> None:
    if name in (b"", b".", b"..") or b"/" in name or b"\x00" in name or len(name) > 255:
        raise BadName("invalid file name")


class NameCipher:
    def __init__(self, name_key: bytes, long_name_max: int = LONG_NAME_MAX) -> None:
        self._siv = AESSIV(name_key)
        self.long_name_max = long_name_max

    def encrypt(self, name: bytes, diriv: bytes) -> str:
        """The encrypted form of ``name`` in the directory with tweak ``diriv`` (before shortening)."""
        check_plain(name)
        return b64u(self._siv.encrypt(name, [NAME_AD + diriv]))

    def decrypt(self, encrypted: str, diriv: bytes) -> bytes:
        try:
            name = self._siv.decrypt(unb64u(encrypted), [NAME_AD + diriv])
        except (InvalidTag, ValueError):
            raise BadName("name does not decrypt in this directory") from None
        check_plain(name)  # a name that authenticates but no writer could have stored
        return name

    def check_form(self, encrypted: str, long: bool) -> None:
        """One spelling per name (FORMAT.md §6): the long form exactly when the encrypted name
        is longer than long_name_max.  The other spelling of a name would list it twice, once
        unopenable; it is damage."""
        if long != (len(encrypted) > self.long_name_max):
            raise BadName("a short name written in the long form" if long else "a long name written in the short form")

    def lower_name(self, name: bytes, diriv: bytes) -> tuple[str, str | None]:
        """(the lower entry's name, the full encrypted name to store beside it if it is long)."""
        e = self.encrypt(name, diriv)
        if len(e) <= self.long_name_max:
            return e, None
        return long_name(e), e


def long_name(encrypted: str) -> str:
    return LONG_PREFIX + b64u(hashlib.sha256(encrypted.encode()).digest())


def sidecar_text(entry: str, raw: bytes | None) -> str:
    """The full encrypted name that long entry ``entry``'s sidecar holds (its bytes ``raw``, None
    when it is missing); BadName unless it is there and hashes to the entry's name."""
    if raw is None:
        raise BadName("its long-name sidecar is missing")
    text = raw.decode("ascii", "replace")
    if long_name(text) != entry:
        raise BadName("the long-name sidecar does not match its entry")
    return text


def is_long(lower: str) -> bool:
    return lower.startswith(LONG_PREFIX) and not lower.endswith(LONG_SUFFIX)


def is_reserved(lower: str) -> bool:
    """Lower entries that are not plaintext entries (tweaks, long-name sidecars, temporaries)."""
    return lower.startswith(RESERVED) and not is_long(lower)
