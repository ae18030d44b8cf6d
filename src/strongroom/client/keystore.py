"""Where a client profile keeps its private key (docs/OPERATIONS.md, "Host keys at rest"):

  file        identity.key holds the Ed25519 key (mode 0600): the default
  passphrase  identity.key holds it encrypted: Argon2id(passphrase) -> AES-256-GCM, so a copy of
              the disk alone does not hold the key
  pkcs11      the key is made in a PKCS#11 token (sensitive, never extractable) and used there
              to sign; the profile keeps only where to find it

The profile's ``key`` entry names the store.  A token key is found by its label and checked
against the public key the profile registered, so another key under that label is refused.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from strongroom.client.errors import StrongroomError
from strongroom.crypto import aead, kdf, token
from strongroom.crypto.identity import Identity, b64u, unb64u

ENCRYPTED_PREFIX = "sr-key-v1."
_AAD = b"strongroom client key v1"


class KeyStoreError(StrongroomError):
    """The key cannot be had; the message says why (never the key, the passphrase or the PIN)."""


def encrypt_key(identity: Identity, passphrase: str) -> str:
    params = kdf.Argon2Params.fresh()
    key = kdf.passphrase_key(passphrase, params)
    sealed = aead.seal(key, identity.private_bytes(), _AAD + identity.public_bytes())
    doc = {"argon2": params.to_json(), "public": b64u(identity.public_bytes()), "sealed": b64u(sealed)}
    return ENCRYPTED_PREFIX + b64u(json.dumps(doc, separators=(",", ":")).encode())


def decrypt_key(text: str, passphrase: str) -> Identity:
    try:
        doc = json.loads(unb64u(text.removeprefix(ENCRYPTED_PREFIX)))
        params = kdf.Argon2Params.from_json(doc["argon2"])
        public, sealed = unb64u(doc["public"]), unb64u(doc["sealed"])
    except (ValueError, KeyError, TypeError) as e:
        raise KeyStoreError(f"the encrypted key is malformed ({type(e).__name__})") from None
    try:
        raw = aead.open_(kdf.passphrase_key(passphrase, params), sealed, _AAD + public)
    except aead.DecryptionError:
        raise KeyStoreError("wrong key passphrase for this profile") from None
    return Identity.from_private_bytes(raw)


@dataclass(frozen=True)
class TokenKey:
    lib: str
    token: str
    pin_file: str
    label: str

    def to_json(self) -> dict[str, str]:
        return {"store": "pkcs11", **asdict(self)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TokenKey:
        return cls(str(doc["lib"]), str(doc["token"]), str(doc["pin_file"]), str(doc["label"]))


class TokenIdentity:
    """An Ed25519 key in a PKCS#11 token: signs there; one session, used under a lock
    (a PKCS#11 session is not for two threads at once)."""

    def __init__(self, ref: TokenKey, public: bytes | None = None) -> None:
        self.ref = ref
        self._lock = threading.Lock()
        self._session: Any = None
        self._key: Any = None
        self._public = public

    def __repr__(self) -> str:
        return f"TokenIdentity(token={self.ref.token!r}, label={self.ref.label!r})"

    def _open(self) -> Any:
        import pkcs11.exceptions as px
        from pkcs11 import KeyType, ObjectClass

        try:
            session = token.open_session(self.ref.lib, self.ref.token, self.ref.pin_file)
        except token.TokenError as e:
            raise KeyStoreError(f"this profile's key is in a PKCS#11 token that cannot be used: {e}") from None
        try:
            key = session.get_key(label=self.ref.label, key_type=KeyType.EC_EDWARDS, object_class=ObjectClass.PRIVATE_KEY)
            pub = session.get_key(label=self.ref.label, key_type=KeyType.EC_EDWARDS, object_class=ObjectClass.PUBLIC_KEY)
        except (px.NoSuchKey, px.MultipleObjectsReturned):
            session.close()
            raise KeyStoreError(f"PKCS#11 token {self.ref.token!r} has no single key pair labelled {self.ref.label!r}") from None
        public = _raw_point(pub)
        if self._public is not None and public != self._public:
            session.close()
            raise KeyStoreError(f"the key labelled {self.ref.label!r} in token {self.ref.token!r} is not this profile's")
        self._public, self._session, self._key = public, session, key
        return key

    def public_bytes(self) -> bytes:
        with self._lock:
            if self._public is None:
                self._open()
            assert self._public is not None
            return self._public

    def sign(self, message: bytes) -> bytes:
        from pkcs11 import Mechanism
        from pkcs11.exceptions import PKCS11Error

        with self._lock:
            key = self._key if self._key is not None else self._open()
            try:
                return bytes(key.sign(message, mechanism=Mechanism.EDDSA))
            except PKCS11Error as e:
                self._key = None  # a token pulled and put back: open again next time
                raise KeyStoreError(f"PKCS#11 token {self.ref.token!r} did not sign ({type(e).__name__})") from None

    @classmethod
    def generate(cls, ref: TokenKey) -> TokenIdentity:
        """A new key pair made in the token (refused if the label is taken)."""
        return cls._create(ref, None)

    @classmethod
    def import_key(cls, ref: TokenKey, identity: Identity) -> TokenIdentity:
        """An existing key put into the token, sensitive and not extractable from then on."""
        return cls._create(ref, identity)

    @classmethod
    def _create(cls, ref: TokenKey, identity: Identity | None) -> TokenIdentity:
        import pkcs11.exceptions as px
        from pkcs11 import Attribute, KeyType, Mechanism, ObjectClass
        from pkcs11.util.ec import encode_named_curve_parameters

        try:
            session = token.open_session(ref.lib, ref.token, ref.pin_file)
        except token.TokenError as e:
            raise KeyStoreError(str(e)) from None
        with session:
            if list(session.get_objects({Attribute.LABEL: ref.label})):
                raise KeyStoreError(f"PKCS#11 token {ref.token!r} already holds an object labelled {ref.label!r}")
            ed25519 = encode_named_curve_parameters("1.3.101.112")
            private = {Attribute.SENSITIVE: True, Attribute.EXTRACTABLE: False, Attribute.TOKEN: True, Attribute.LABEL: ref.label}
            try:
                if identity is None:
                    params = session.create_domain_parameters(KeyType.EC_EDWARDS, {Attribute.EC_PARAMS: ed25519}, local=True)
                    params.generate_keypair(
                        store=True, label=ref.label, mechanism=Mechanism.EC_EDWARDS_KEY_PAIR_GEN, private_template=private
                    )
                else:
                    common = {Attribute.KEY_TYPE: KeyType.EC_EDWARDS, Attribute.EC_PARAMS: ed25519, Attribute.TOKEN: True}
                    point = b"\x04\x20" + identity.public_bytes()  # DER OCTET STRING
                    session.create_object(
                        {
                            **common,
                            **private,
                            Attribute.CLASS: ObjectClass.PRIVATE_KEY,
                            Attribute.VALUE: identity.private_bytes(),
                            Attribute.SIGN: True,
                        }
                    )
                    session.create_object(
                        {
                            **common,
                            Attribute.CLASS: ObjectClass.PUBLIC_KEY,
                            Attribute.LABEL: ref.label,
                            Attribute.EC_POINT: point,
                            Attribute.VERIFY: True,
                        }
                    )
            except px.PKCS11Error as e:
                raise KeyStoreError(f"PKCS#11 token {ref.token!r} could not make the key ({type(e).__name__})") from None
        return cls(ref, identity.public_bytes() if identity is not None else None)


def _raw_point(pub: Any) -> bytes:
    from pkcs11 import Attribute

    point = bytes(pub[Attribute.EC_POINT])
    if len(point) == 34 and point[:2] == b"\x04\x20":
        return point[2:]
    if len(point) == 32:
        return point
    raise KeyStoreError("the token's public key is not an Ed25519 point")


def passphrase_from_env() -> str | None:
    """STRONGROOM_KEY_PASSPHRASE_FILE (a file) or STRONGROOM_KEY_PASSPHRASE."""
    path = os.environ.get("STRONGROOM_KEY_PASSPHRASE_FILE")
    if path:
        try:
            return Path(path).read_text().removeprefix("\ufeff").rstrip("\r\n")
        except OSError as e:
            raise KeyStoreError(f"STRONGROOM_KEY_PASSPHRASE_FILE {path}: {e.strerror}") from None
    return os.environ.get("STRONGROOM_KEY_PASSPHRASE") or None
