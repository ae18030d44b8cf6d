"""Encrypt and Decrypt with a managed AES key, in OpenSSL through ``cryptography``: CBC with
PKCS#5 padding (or none) and a server-made IV unless the client gives one, and GCM with its
additional data and tag.  The key never leaves the writer process."""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from strongroom.server.kmip import tags as t
from strongroom.server.kmip.lifecycle import Fail
from strongroom.server.kmip.ttlv import Item


class Params:
    """Cryptographic Parameters, as far as these ciphers use them."""

    def __init__(self, item: Item | None) -> None:
        p = item if item is not None else Item(t.CRYPTOGRAPHIC_PARAMETERS, t.STRUCTURE, [])
        self.mode = p.get(t.BLOCK_CIPHER_MODE, t.ENUM, t.CBC)
        self.padding = p.get(t.PADDING_METHOD, t.ENUM, t.PKCS5 if self.mode == t.CBC else t.PADDING_NONE)
        self.algorithm = p.get(t.CRYPTOGRAPHIC_ALGORITHM, t.ENUM, t.AES)
        self.random_iv = p.get(t.RANDOM_IV, t.BOOL, None)
        self.tag_length = p.get(t.TAG_LENGTH, t.INTEGER, 16)
        if self.algorithm != t.AES:
            raise Fail(t.INVALID_FIELD, "only AES is supported for Encrypt and Decrypt")
        if self.mode not in (t.CBC, t.GCM):
            raise Fail(t.INVALID_FIELD, "the block cipher mode must be CBC or GCM")
        if self.mode == t.CBC and self.padding not in (t.PKCS5, t.PADDING_NONE):
            raise Fail(t.INVALID_FIELD, "CBC takes PKCS5 padding or none")
        if self.mode == t.GCM and not 12 <= self.tag_length <= 16:
            raise Fail(t.INVALID_FIELD, "a GCM tag is 12 to 16 bytes")


def encrypt(key: bytes, p: Params, data: bytes, iv: bytes | None, aad: bytes | None) -> tuple[bytes, bytes | None, bytes | None]:
    """(ciphertext, the IV if the server made it, the GCM tag)."""
    made = None
    if p.mode == t.CBC:
        if iv is None:
            iv = made = os.urandom(16)
        if len(iv) != 16:
            raise Fail(t.INVALID_FIELD, "a CBC IV is 16 bytes")
        if p.padding == t.PKCS5:
            padder = padding.PKCS7(128).padder()
            data = padder.update(data) + padder.finalize()
        elif len(data) % 16:
            raise Fail(t.INVALID_FIELD, "without padding, CBC data must be a multiple of 16 bytes")
        enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
        return enc.update(data) + enc.finalize(), made, None
    if iv is None:
        iv = made = os.urandom(12)
    if not 12 <= len(iv) <= 16:
        raise Fail(t.INVALID_FIELD, "a GCM nonce is 12 to 16 bytes")
    gcm = Cipher(algorithms.AES(key), modes.GCM(iv)).encryptor()
    if aad:
        gcm.authenticate_additional_data(aad)
    out = gcm.update(data) + gcm.finalize()
    return out, made, gcm.tag[: p.tag_length]


def decrypt(key: bytes, p: Params, data: bytes, iv: bytes | None, aad: bytes | None, tag: bytes | None) -> bytes:
    if iv is None:
        raise Fail(t.INVALID_FIELD, "Decrypt needs the IV/Counter/Nonce")
    try:
        if p.mode == t.CBC:
            if len(iv) != 16 or len(data) % 16:
                raise Fail(t.INVALID_FIELD, "CBC needs a 16-byte IV and whole blocks")
            dec = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
            out = dec.update(data) + dec.finalize()
            if p.padding == t.PKCS5:
                unpadder = padding.PKCS7(128).unpadder()
                out = unpadder.update(out) + unpadder.finalize()
            return out
        if tag is None or not 12 <= len(tag) <= 16:
            raise Fail(t.INVALID_FIELD, "GCM Decrypt needs the authenticated encryption tag (12 to 16 bytes)")
        if not 12 <= len(iv) <= 16:
            raise Fail(t.INVALID_FIELD, "a GCM nonce is 12 to 16 bytes")
        gcm = Cipher(algorithms.AES(key), modes.GCM(iv, tag, min_tag_length=len(tag))).decryptor()
        if aad:
            gcm.authenticate_additional_data(aad)
        return gcm.update(data) + gcm.finalize()
    except (InvalidTag, ValueError):
        raise Fail(t.CRYPTOGRAPHIC_FAILURE, "the data did not decrypt under this key") from None
