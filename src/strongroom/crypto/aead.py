"""AES-256-GCM sealing with random nonces, and key wrapping built on it.

A sealed blob is ``nonce (12 bytes) || ciphertext || tag (16 bytes)``.  Keys and
nonces come from the OS CSPRNG (os.urandom -> getrandom(2)).
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
OVERHEAD = NONCE_BYTES + TAG_BYTES


class DecryptionError(Exception):
    """Ciphertext failed authentication: wrong key, wrong AAD, or tampered data."""


def new_key() -> bytes:
    """A fresh random 256-bit key from the OS CSPRNG."""
    return os.urandom(KEY_BYTES)


def seal(key: bytes, plaintext: bytes, aad: bytes = b"") -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_(key: bytes, blob: bytes, aad: bytes = b"") -> bytes:
    if len(blob) < OVERHEAD:
        raise DecryptionError("sealed blob is too short")
    try:
        return AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad)
    except InvalidTag:
        raise DecryptionError("authentication failed") from None


def wrap_key(kek: bytes, key: bytes, aad: bytes) -> bytes:
    """Wrap a key under a key-encryption key, bound to ``aad``."""
    if len(key) != KEY_BYTES:
        raise ValueError("only 256-bit keys are wrapped")
    return seal(kek, key, aad)


def unwrap_key(kek: bytes, wrapped: bytes, aad: bytes) -> bytes:
    key = open_(kek, wrapped, aad)
    if len(key) != KEY_BYTES:
        raise DecryptionError("wrapped key has the wrong length")
    return key
