"""Ed25519 identities for clients: generated on the host, only the public half leaves it."""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import functools
from typing import Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64u(text: str) -> bytes:
    """Strict base64url without padding; raises ValueError on anything else."""
    if not isinstance(text, str) or any(c in text for c in "=+/ \n"):
        raise ValueError("not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError):
        raise ValueError("not base64url") from None


class Signer(Protocol):
    """What a client signs its requests with: an Identity here, or a key in a token
    (client/keystore.py)."""

    def public_bytes(self) -> bytes: ...

    def sign(self, message: bytes) -> bytes: ...


class Identity:
    """A private signing key (Ed25519, from the OS CSPRNG via OpenSSL)."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key

    @classmethod
    def generate(cls) -> Identity:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_private_bytes(cls, raw: bytes) -> Identity:
        return cls(Ed25519PrivateKey.from_private_bytes(raw))

    def private_bytes(self) -> bytes:
        return self._key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())

    def public_bytes(self) -> bytes:
        return self._key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    def __repr__(self) -> str:  # never show key material
        return f"Identity(public={b64u(self.public_bytes())})"


@functools.lru_cache(maxsize=1)
def _sodium() -> ctypes.CDLL | None:
    """The OS's libsodium (Debian's libsodium23), when present (pyca/cryptography otherwise).

    The server verifies an Ed25519 signature on every request: OpenSSL 3.0 takes ~170 µs per
    verification on this project's machines, libsodium ~90 µs, and ctypes releases the GIL for it.
    Both implement RFC 8032; libsodium is the stricter of the two (it also refuses small-order
    public keys and non-canonical encodings)."""
    name = ctypes.util.find_library("sodium")
    if name is None:
        return None
    try:
        so = ctypes.CDLL(name)
    except OSError:
        return None
    if so.sodium_init() < 0:
        return None
    fn = so.crypto_sign_ed25519_verify_detached
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulonglong, ctypes.c_char_p]
    return so


def verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is public_key's Ed25519 signature of ``message``."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    so = _sodium()
    if so is not None:
        return bool(so.crypto_sign_ed25519_verify_detached(signature, message, len(message), public_key) == 0)
    return verify_openssl(public_key, signature, message)


def verify_openssl(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """The same check through pyca/cryptography (OpenSSL): the fallback without libsodium."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True
