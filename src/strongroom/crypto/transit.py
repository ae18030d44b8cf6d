"""Transit keys at work: AES-256-GCM, ChaCha20-Poly1305 and Ed25519 over pyca's primitives.

A ``Keyring`` holds the unwrapped versions of one key for the length of one request (the barrier
makes it); it encrypts, decrypts, signs, verifies and computes HMACs, and has no way to hand the
material out.  Wire forms follow Vault's transit engine: a ciphertext is the 12-byte nonce, then
the AEAD output; a signature is Ed25519's 64 bytes."""

from __future__ import annotations

import hashlib
import hmac as hmac_mod
import os

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

AES = "aes256-gcm96"
CHACHA = "chacha20-poly1305"
ED25519 = "ed25519"
TYPES = (AES, CHACHA, ED25519)
NONCE = 12
MATERIAL_BYTES = 32
HMAC_ALGORITHMS = {
    "sha2-224": hashlib.sha224,
    "sha2-256": hashlib.sha256,
    "sha2-384": hashlib.sha384,
    "sha2-512": hashlib.sha512,
    "sha3-224": hashlib.sha3_224,
    "sha3-256": hashlib.sha3_256,
    "sha3-384": hashlib.sha3_384,
    "sha3-512": hashlib.sha3_512,
}


class TransitError(ValueError):
    """A ciphertext that does not open, or an operation the key's type does not support."""


def new_material() -> bytes:
    return os.urandom(MATERIAL_BYTES)


def _hkdf(material: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(material)


class Keyring:
    __slots__ = ("_derived", "_kind", "_materials", "_cache")

    def __init__(self, kind: str, materials: dict[int, bytes], derived: bool) -> None:
        self._kind = kind
        self._materials = materials
        self._derived = derived
        self._cache: dict[tuple[int, bytes], AESGCM | ChaCha20Poly1305] = {}

    def _key(self, version: int, context: bytes | None) -> bytes:
        material = self._materials.get(version)
        if material is None:
            raise TransitError("key version not available")
        if self._derived:
            if not context:
                raise TransitError("missing 'context' for key derivation; the key was created using a derived key")
            return _hkdf(material, b"strongroom transit derive v1\0" + context)
        return material

    def _aead(self, version: int, context: bytes | None) -> AESGCM | ChaCha20Poly1305:
        if self._kind == ED25519:
            raise TransitError(f"message encryption not supported for key type {self._kind}")
        slot = (version, context or b"")
        got = self._cache.get(slot)
        if got is None:
            key = self._key(version, context)
            got = self._cache[slot] = AESGCM(key) if self._kind == AES else ChaCha20Poly1305(key)
        return got

    def encrypt(self, version: int, plaintext: bytes, context: bytes | None, aad: bytes | None) -> bytes:
        nonce = os.urandom(NONCE)
        return nonce + self._aead(version, context).encrypt(nonce, plaintext, aad or None)

    def decrypt(self, version: int, blob: bytes, context: bytes | None, aad: bytes | None) -> bytes:
        cipher = self._aead(version, context)
        if len(blob) < NONCE + 16:
            raise TransitError("invalid ciphertext length")
        try:
            return cipher.decrypt(blob[:NONCE], blob[NONCE:], aad or None)
        except InvalidTag:
            raise TransitError("cipher: message authentication failed") from None

    def hmac(self, version: int, algorithm: str, data: bytes) -> bytes:
        digest = HMAC_ALGORITHMS.get(algorithm)
        if digest is None:
            raise TransitError(f"unsupported algorithm {algorithm}")
        material = self._materials.get(version)
        if material is None:
            raise TransitError("key version not available")
        return hmac_mod.new(_hkdf(material, b"strongroom transit hmac v1"), data, digest).digest()

    def _signer(self, version: int, context: bytes | None) -> Ed25519PrivateKey:
        if self._kind != ED25519:
            raise TransitError(f"key type {self._kind} does not support signing")
        return Ed25519PrivateKey.from_private_bytes(self._key(version, context))

    def sign(self, version: int, data: bytes, context: bytes | None) -> bytes:
        return self._signer(version, context).sign(data)

    def verify(self, version: int, data: bytes, signature: bytes, context: bytes | None) -> bool:
        public = self._signer(version, context).public_key()
        try:
            public.verify(signature, data)
        except InvalidSignature:
            return False
        return True

    def public_key(self, version: int) -> bytes | None:
        """An Ed25519 version's public key (of the underived key); None for other types."""
        if self._kind != ED25519 or self._derived:
            return None
        key = Ed25519PrivateKey.from_private_bytes(self._materials[version]).public_key()
        return key.public_bytes(Encoding.Raw, PublicFormat.Raw)
