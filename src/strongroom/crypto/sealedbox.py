"""Seal a small secret to an X25519 public key (ephemeral-static ECDH + HKDF + AES-GCM).

Used to hand the unseal key from one server process to another through the shared
database without the database ever holding anything it could open by itself.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from strongroom.crypto import aead, kdf

_PUB = 32


def _raw_public(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class BoxKey:
    """An in-memory X25519 key pair that can open boxes sealed to it."""

    def __init__(self) -> None:
        self._key = X25519PrivateKey.generate()
        self.public = _raw_public(self._key)

    def open(self, box: bytes, aad: bytes) -> bytes:
        if len(box) < _PUB + aead.OVERHEAD:
            raise aead.DecryptionError("box too short")
        shared = self._key.exchange(X25519PublicKey.from_public_bytes(box[:_PUB]))
        key = kdf.subkey(shared + box[:_PUB] + self.public, "strongroom sealedbox v1")
        return aead.open_(key, box[_PUB:], aad)

    def __repr__(self) -> str:
        return "BoxKey(<private>)"


def seal_to(public: bytes, plaintext: bytes, aad: bytes) -> bytes:
    eph = X25519PrivateKey.generate()
    eph_pub = _raw_public(eph)
    shared = eph.exchange(X25519PublicKey.from_public_bytes(public))
    key = kdf.subkey(shared + eph_pub + public, "strongroom sealedbox v1")
    return eph_pub + aead.seal(key, plaintext, aad)
