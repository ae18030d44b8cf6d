"""Extended attributes (docs/FORMAT.md §6): names under AES-SIV with the xattr-name key, values
sealed with AES-GCM under the xattr-value key, bound to their lower name and (format version 4)
to their file: its file id, or its directory tweak, so a value copied to another entry fails."""

from __future__ import annotations

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from strongroom.fs import content, keys
from strongroom.fs.names import BadName, b64u, unb64u

NAME_AD = b"strongroom/v1/xattr-name"
VALUE_AD = b"strongroom/v1/xattr-value\x00"
PREFIX = "user.sr."
ACL_NAMES = ("system.posix_acl_access", "system.posix_acl_default")  # posix_acl.py

# What a value is bound to, by the kind of entry (version 4; None: versions 1-3, the name only).
EMPTY = b"empty"  # an empty regular file has no header, hence no file id


def file_binding(file_id: bytes) -> bytes:
    """A non-empty regular file's binding: its file id (§5)."""
    return b"file\x00" + file_id


def header_binding(header: bytes) -> bytes:
    """The binding of the file whose header is ``header``: the id is read, not authenticated
    (a changed id would break the file's content as well)."""
    if len(header) < content.HEADER or header[:4] != content.MAGIC:
        raise content.DamagedFile("header is truncated or not a Strongroom file")
    return file_binding(header[8 : content.PREFIX])


def dir_binding(tweak: bytes) -> bytes:
    return b"dir\x00" + tweak


def value_ad(lower: str, binding: bytes | None) -> bytes:
    return VALUE_AD + lower.encode() + (b"" if binding is None else b"\x00" + binding)


class XattrCipher:
    def __init__(self, name_key: bytes, value_key: bytes, salted: bool = False) -> None:
        """``salted`` (format version 5): each value sealed under its own subkey (FORMAT.md §2)."""
        self._siv = AESSIV(name_key)
        self._value_key = value_key
        self._salted = salted

    def lower_name(self, name: str) -> str:
        """user.X -> user.sr.<b64u(SIV(X))>; the two POSIX ACL names (system.posix_acl_access,
        system.posix_acl_default) -> user.sr.<b64u(SIV(NUL ‖ name))>, apart from any user name
        (which cannot hold a NUL).  Nothing else is exposed."""
        if name in ACL_NAMES:
            return PREFIX + b64u(self._siv.encrypt(b"\x00" + name.encode(), [NAME_AD]))
        if not name.startswith("user.") or len(name) == 5:
            raise BadName("only user.* extended attributes are supported")
        return PREFIX + b64u(self._siv.encrypt(name[5:].encode(), [NAME_AD]))

    def plain_name(self, lower: str) -> str:
        if not lower.startswith(PREFIX):
            raise BadName("not a Strongroom attribute")
        try:
            plain = self._siv.decrypt(unb64u(lower[len(PREFIX) :]), [NAME_AD])
        except (InvalidTag, ValueError):
            raise BadName("attribute name does not decrypt") from None
        if plain.startswith(b"\x00"):
            name = plain[1:].decode("ascii", "replace")
            if name not in ACL_NAMES:
                raise BadName("attribute name is no name this version stores")
            return name
        try:
            return "user." + plain.decode()
        except UnicodeDecodeError:
            raise BadName("attribute name does not decrypt") from None

    def seal_value(self, lower: str, value: bytes, binding: bytes | None) -> bytes:
        if self._salted:
            return keys.seal_salted(self._value_key, "xattr-value", value_ad(lower, binding), value)
        return keys.seal(self._value_key, value_ad(lower, binding), value)

    def open_value(self, lower: str, sealed: bytes, binding: bytes | None) -> bytes:
        if self._salted:
            return keys.open_salted(self._value_key, "xattr-value", value_ad(lower, binding), sealed, "the attribute value")
        return keys.open_sealed(self._value_key, value_ad(lower, binding), sealed, "the attribute value")

    @property
    def overhead(self) -> int:
        """Bytes a sealed value is longer than its plaintext."""
        return keys.NONCE + 16 + (keys.SALT if self._salted else 0)
