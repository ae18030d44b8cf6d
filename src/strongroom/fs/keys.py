"""The volume's key hierarchy (docs/FORMAT.md §2): a random KEK wraps every other key.

No key is derived from another and each has one purpose; WRAP binds the purpose and the volume.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PREFIX = b"strongroom/v1/"
PURPOSES = {"names": 64, "xattr-names": 64, "xattr-values": 32, "rules-mac": 32}
NONCE = 12


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


def wrap_aad(purpose: str, volume_id: bytes, extra: bytes = b"") -> bytes:
    return PREFIX + purpose.encode() + b"\x00" + volume_id + extra


def wrap(kek: bytes, purpose: str, volume_id: bytes, key: bytes, extra: bytes = b"") -> bytes:
    return seal(kek, wrap_aad(purpose, volume_id, extra), key)


def unwrap(kek: bytes, purpose: str, volume_id: bytes, wrapped: bytes, extra: bytes = b"") -> bytes:
    return open_sealed(kek, wrap_aad(purpose, volume_id, extra), wrapped, f"the {purpose} key")


@dataclass(frozen=True)
class VolumeKeys:
    """Everything a mounted volume holds in memory."""

    volume_id: bytes
    kek: bytes
    names: bytes
    xattr_names: bytes
    xattr_values: bytes
    rules_mac: bytes

    @classmethod
    def fresh(cls, volume_id: bytes) -> VolumeKeys:
        return cls(volume_id, os.urandom(32), *(os.urandom(PURPOSES[p]) for p in PURPOSES))

    def wrapped(self) -> dict[str, bytes]:
        return {p: wrap(self.kek, p, self.volume_id, self.by_purpose(p)) for p in PURPOSES}

    def by_purpose(self, purpose: str) -> bytes:
        return {
            "names": self.names,
            "xattr-names": self.xattr_names,
            "xattr-values": self.xattr_values,
            "rules-mac": self.rules_mac,
        }[purpose]

    @classmethod
    def unwrapped(cls, volume_id: bytes, kek: bytes, wrapped: dict[str, bytes]) -> VolumeKeys:
        keys = {}
        for purpose, size in PURPOSES.items():
            if purpose not in wrapped:
                raise WrongKey(f"the config has no wrapped {purpose} key")
            key = unwrap(kek, purpose, volume_id, wrapped[purpose])
            if len(key) != size:
                raise WrongKey(f"the {purpose} key has the wrong size")
            keys[purpose] = key
        return cls(volume_id, kek, keys["names"], keys["xattr-names"], keys["xattr-values"], keys["rules-mac"])

    def rewrapped(self, new_kek: bytes) -> VolumeKeys:
        return VolumeKeys(self.volume_id, new_kek, self.names, self.xattr_names, self.xattr_values, self.rules_mac)
