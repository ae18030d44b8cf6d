"""Extended attributes (docs/FORMAT.md §6): names under AES-SIV with the xattr-name key, values
sealed with AES-GCM under the xattr-value key, bound to their lower name."""

from __future__ import annotations

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from strongroom.fs import keys
from strongroom.fs.names import BadName, b64u, unb64u

NAME_AD = b"strongroom/v1/xattr-name"
VALUE_AD = b"strongroom/v1/xattr-value\x00"
PREFIX = "user.sr."


class XattrCipher:
    def __init__(self, name_key: bytes, value_key: bytes) -> None:
        self._siv = AESSIV(name_key)
        self._value_key = value_key

    def lower_name(self, name: str) -> str:
        """user.X -> user.sr.<b64u(SIV(X))>; only the user namespace is exposed."""
        if not name.startswith("user.") or len(name) == 5:
            raise BadName("only user.* extended attributes are supported")
        return PREFIX + b64u(self._siv.encrypt(name[5:].encode(), [NAME_AD]))

    def plain_name(self, lower: str) -> str:
        if not lower.startswith(PREFIX):
            raise BadName("not a Strongroom attribute")
        try:
            return "user." + self._siv.decrypt(unb64u(lower[len(PREFIX) :]), [NAME_AD]).decode()
        except (InvalidTag, ValueError, UnicodeDecodeError):
            raise BadName("attribute name does not decrypt") from None

    def seal_value(self, lower: str, value: bytes) -> bytes:
        return keys.seal(self._value_key, VALUE_AD + lower.encode(), value)

    def open_value(self, lower: str, sealed: bytes) -> bytes:
        return keys.open_sealed(self._value_key, VALUE_AD + lower.encode(), sealed, "the attribute value")
