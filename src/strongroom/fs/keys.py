"""The volume's key hierarchy (docs/FORMAT.md §2): a random KEK wraps every other key.

No stored key is derived from another and each has one purpose; WRAP binds the purpose and the
volume.  From format version 5 a long-lived key never seals directly: each seal is made under a
one-time subkey named by a 128-bit salt (SUBKEY), so no key comes near the random-nonce bound.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PREFIX = b"strongroom/v1/"
PURPOSES = {"names": 64, "xattr-names": 64, "xattr-values": 32, "rules-mac": 32}
PURPOSES_V5 = {**PURPOSES, "dir-ids": 32}  # version 5: the MAC key of directory tweaks (§6)
NONCE = 12
SALT = 16
SUBKEY_AD = b"strongroom/v5/subkey\x00"
V5 = 5  # the format version from which seals are salted, headers carry a kind, tweaks are keyed

# Object kinds (version 5): what a header's content is, inside its authenticated prefix (§5).
FILE, SYMLINK, EXPORT = 1, 2, 3
KIND_NAMES = {FILE: "file content", SYMLINK: "a symlink target", EXPORT: "a standalone export"}


class WrongKey(Exception):
    """A wrapped key did not open: wrong KEK, another volume, or tampering."""


def seal(key: bytes, aad: bytes, plaintext: bytes) -> bytes:
    nonce = os.urandom(NONCE)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_sealed(key: bytes, aad: bytes, sealed: bytes, what: str) -> bytes:
    if len(sealed) < NONCE + 16:
        raise WrongKey(f"{what}: too short")
    try:
        return AESGCM(key).decrypt(sealed[:NONCE], sealed[NONCE:], aad)
    except InvalidTag:
        raise WrongKey(f"{what} does not open with this key") from None


def subkey(key: bytes, purpose: str, salt: bytes) -> bytes:
    """The one-time key for one seal by ``key`` (HMAC-SHA256 as a PRF: ``key`` is uniform)."""
    return hmac.digest(key, SUBKEY_AD + purpose.encode() + b"\x00" + salt, "sha256")


def seal_salted(key: bytes, purpose: str, aad: bytes, plaintext: bytes) -> bytes:
    """salt ‖ SEAL(SUBKEY(key, purpose, salt), aad, plaintext) with a fresh random salt."""
    salt = os.urandom(SALT)
    return salt + seal(subkey(key, purpose, salt), aad, plaintext)


def open_salted(key: bytes, purpose: str, aad: bytes, sealed: bytes, what: str) -> bytes:
    if len(sealed) < SALT + NONCE + 16:
        raise WrongKey(f"{what}: too short")
    return open_sealed(subkey(key, purpose, sealed[:SALT]), aad, sealed[SALT:], what)


def wrap_aad(purpose: str, volume_id: bytes, extra: bytes = b"") -> bytes:
    return PREFIX + purpose.encode() + b"\x00" + volume_id + extra


def wrap(kek: bytes, purpose: str, volume_id: bytes, key: bytes, extra: bytes = b"", salted: bool = False) -> bytes:
    aad = wrap_aad(purpose, volume_id, extra)
    return seal_salted(kek, purpose, aad, key) if salted else seal(kek, aad, key)


def unwrap(kek: bytes, purpose: str, volume_id: bytes, wrapped: bytes, extra: bytes = b"", salted: bool = False) -> bytes:
    aad, what = wrap_aad(purpose, volume_id, extra), f"the {purpose} key"
    return open_salted(kek, purpose, aad, wrapped, what) if salted else open_sealed(kek, aad, wrapped, what)


@dataclass(frozen=True)
class VolumeKeys:
    """Everything a mounted volume holds in memory."""

    volume_id: bytes
    kek: bytes
    names: bytes
    xattr_names: bytes
    xattr_values: bytes
    rules_mac: bytes
    dir_ids: bytes = b""  # version 5 only
    version: int = 4  # the volume's format version (authenticated by the config's params_mac)

    @property
    def salted(self) -> bool:
        return self.version >= V5

    def kind(self, kind: int) -> int:
        """The kind a header of this volume carries for ``kind`` (0: before version 5, none)."""
        return kind if self.salted else 0

    @staticmethod
    def purposes(version: int) -> dict[str, int]:
        return PURPOSES_V5 if version >= V5 else PURPOSES

    @classmethod
    def fresh(cls, volume_id: bytes, version: int = V5) -> VolumeKeys:
        made = {p: os.urandom(n) for p, n in cls.purposes(version).items()}
        return cls.of(volume_id, os.urandom(32), made, version)

    @classmethod
    def of(cls, volume_id: bytes, kek: bytes, by_purpose: dict[str, bytes], version: int) -> VolumeKeys:
        k = by_purpose
        return cls(
            volume_id, kek, k["names"], k["xattr-names"], k["xattr-values"], k["rules-mac"], k.get("dir-ids", b""), version
        )

    def wrapped(self) -> dict[str, bytes]:
        return {p: wrap(self.kek, p, self.volume_id, self.by_purpose(p), salted=self.salted) for p in self.purposes(self.version)}

    def by_purpose(self, purpose: str) -> bytes:
        return {
            "names": self.names,
            "xattr-names": self.xattr_names,
            "xattr-values": self.xattr_values,
            "rules-mac": self.rules_mac,
            "dir-ids": self.dir_ids,
        }[purpose]

    @classmethod
    def unwrapped(cls, volume_id: bytes, kek: bytes, wrapped: dict[str, bytes], version: int) -> VolumeKeys:
        keys = {}
        purposes = cls.purposes(version)
        if set(wrapped) != set(purposes):
            raise WrongKey(f"the config must wrap exactly the keys {', '.join(sorted(purposes))}")
        for purpose, size in purposes.items():
            key = unwrap(kek, purpose, volume_id, wrapped[purpose], salted=version >= V5)
            if len(key) != size:
                raise WrongKey(f"the {purpose} key has the wrong size")
            keys[purpose] = key
        return cls.of(volume_id, kek, keys, version)

    def rewrapped(self, new_kek: bytes) -> VolumeKeys:
        return VolumeKeys(
            self.volume_id, new_kek, self.names, self.xattr_names, self.xattr_values, self.rules_mac, self.dir_ids, self.version
        )
