"""The crypto layer: round trips, tamper detection, AAD binding, and the request-signing vector of docs/API.md."""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strongroom.crypto import aead, identity, kdf, reqsig, sealedbox
from strongroom.crypto.identity import Identity, b64u, unb64u, verify

pytestmark = pytest.mark.unit  # the fast tier: no root, FUSE, PostgreSQL or server process


@given(st.binary(max_size=5000), st.binary(max_size=64))
def test_seal_round_trip_and_any_flip_fails(data: bytes, aad: bytes) -> None:
    key = aead.new_key()
    blob = aead.seal(key, data, aad)
    assert len(blob) == len(data) + aead.OVERHEAD
    assert aead.open_(key, blob, aad) == data
    for i in {0, len(blob) // 2, len(blob) - 1}:
        bad = bytearray(blob)
        bad[i] ^= 0x80
        with pytest.raises(aead.DecryptionError):
            aead.open_(key, bytes(bad), aad)
    with pytest.raises(aead.DecryptionError):
        aead.open_(key, blob, aad + b"x")
    with pytest.raises(aead.DecryptionError):
        aead.open_(aead.new_key(), blob, aad)


def test_nonces_and_keys_are_fresh() -> None:
    key = aead.new_key()
    assert len({aead.seal(key, b"same")[:12] for _ in range(1000)}) == 1000
    assert len({aead.new_key() for _ in range(1000)}) == 1000


def test_wrap_binds_aad_and_length() -> None:
    kek, key = aead.new_key(), aead.new_key()
    w = aead.wrap_key(kek, key, b"deposit 1")
    assert aead.unwrap_key(kek, w, b"deposit 1") == key
    with pytest.raises(aead.DecryptionError):
        aead.unwrap_key(kek, w, b"deposit 2")
    with pytest.raises(ValueError):
        aead.wrap_key(kek, b"short", b"")
    with pytest.raises(aead.DecryptionError):
        aead.open_(kek, b"tiny")


def test_known_aes_gcm_vector() -> None:
    # NIST GCM test vector (gcmEncryptExtIV256, Count 0 with empty plaintext), as a check that
    # the layout nonce || ciphertext || tag is what FORMAT-style decoders expect.
    key = bytes.fromhex("b52c505a37d78eda5dd34f20c22540ea1b58963cf8e5bf8ffa85f9f2492505b4")
    nonce = bytes.fromhex("516c33929df5a3284ff463d7")
    tag = bytes.fromhex("bdc1ac884d332457a1d2664f168c76f0")
    assert aead.open_(key, nonce + tag) == b""


def test_argon2id_is_deterministic_and_parameter_bound() -> None:
    p = kdf.Argon2Params(salt=b"\x01" * 16, memory_kib=64, iterations=1)
    k1 = kdf.passphrase_key("pw", p)
    assert k1 == kdf.passphrase_key("pw", p) and len(k1) == 32
    assert k1 != kdf.passphrase_key("pw2", p)
    assert k1 != kdf.passphrase_key("pw", kdf.Argon2Params(salt=b"\x02" * 16, memory_kib=64, iterations=1))
    assert kdf.Argon2Params.from_json(p.to_json()) == p
    with pytest.raises(ValueError):
        kdf.passphrase_key("", p)
    with pytest.raises(ValueError):
        kdf.Argon2Params.from_json({"salt": "zz"})
    assert kdf.subkey(k1, "a") != kdf.subkey(k1, "b")


def test_identity_sign_verify_and_repr_hides_key() -> None:
    ident = Identity.generate()
    sig = ident.sign(b"msg")
    assert verify(ident.public_bytes(), sig, b"msg")
    assert not verify(ident.public_bytes(), sig, b"msh")
    assert not verify(b"\x00" * 31, sig, b"msg")
    again = Identity.from_private_bytes(ident.private_bytes())
    assert again.public_bytes() == ident.public_bytes()
    assert b64u(ident.private_bytes()) not in repr(ident)


def test_libsodium_is_used_and_agrees_with_openssl() -> None:
    """The server's verifier (the OS's libsodium) and pyca/OpenSSL give the same verdicts on good
    signatures and on every kind of damage; libsodium also refuses a small-order public key."""
    assert identity._sodium() is not None, "install.sh installs libsodium23"
    for _ in range(50):
        ident = Identity.generate()
        pub, msg = ident.public_bytes(), os.urandom(int.from_bytes(os.urandom(1), "big"))
        sig = ident.sign(msg)
        cases = [
            (pub, sig, msg),
            (pub, sig, msg + b"x"),
            (pub, bytes([sig[0] ^ 1]) + sig[1:], msg),
            (pub, sig[:32] + bytes([sig[32] ^ 1]) + sig[33:], msg),
            (Identity.generate().public_bytes(), sig, msg),
            (pub, sig[:63], msg),
            (pub[:31], sig, msg),
        ]
        for p, s, m in cases:
            assert verify(p, s, m) == identity.verify_openssl(p, s, m)
        assert verify(pub, sig, msg)
    small_order = bytes(32)  # the identity point's neighbour (y = 0): order 4
    assert not verify(small_order, bytes(64), b"")


@pytest.mark.parametrize("bad", ["a=", "a+b", "a/b", "a b", "\n"])
def test_unb64u_is_strict(bad: str) -> None:
    with pytest.raises(ValueError):
        unb64u(bad)


def test_sealedbox() -> None:
    box = sealedbox.BoxKey()
    sealed = sealedbox.seal_to(box.public, b"unseal key", b"node 1")
    assert box.open(sealed, b"node 1") == b"unseal key"
    with pytest.raises(aead.DecryptionError):
        box.open(sealed, b"node 2")
    with pytest.raises(aead.DecryptionError):
        sealedbox.BoxKey().open(sealed, b"node 1")


def test_request_signing_vector() -> None:
    """The worked example of docs/API.md, byte for byte."""
    seed = bytes(range(32))
    ident = Identity.from_private_bytes(seed)
    body = b'{"data":"aGVsbG8="}'
    msg = reqsig.string_to_sign(
        "put", "/v1/deposits/db-key", "", body, "1767225600", "AAECAwQFBgcICQoLDA0ODxAR", "c_AAECAwQFBgcICQoL"
    )
    assert msg == (
        b"STRONGROOM-ED25519-V1\nPUT\n/v1/deposits/db-key\n\n"
        + hashlib.sha256(body).hexdigest().encode()
        + b"\n1767225600\nAAECAwQFBgcICQoLDA0ODxAR\nc_AAECAwQFBgcICQoL"
    )
    assert b64u(ident.public_bytes()) == "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg"
    assert b64u(ident.sign(msg)) == VECTOR_SIGNATURE


VECTOR_SIGNATURE = "dHNjIyuFKEWSGeHEHjzpDr3m-CN2vlCkyGbDOniNf8mZpNVH_0hAOSkM3kTE8VcLrtwOampzp0p43DA9TuXFAw"


def test_new_argon2id_parameters_have_a_floor() -> None:
    """No new seal is made with less than MEMORY_KIB_FLOOR of memory (FORMAT.md §4), whatever the
    environment asks for; a version-5 config naming less is refused (tests/fs/test_format.py)."""
    with pytest.raises(ValueError, match="too weak"):
        kdf.Argon2Params.fresh(memory_kib=kdf.MEMORY_KIB_FLOOR - 1)
    assert kdf.Argon2Params.fresh(memory_kib=kdf.MEMORY_KIB_FLOOR).memory_kib == kdf.MEMORY_KIB_FLOOR
