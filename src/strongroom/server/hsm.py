"""The HSM seal: the unseal key U encrypted by a non-extractable AES-256 key in a PKCS#11 token
(python-pkcs11; tested with SoftHSM2), so a server starts and unseals with no person present.

The key never leaves the token: it is made there (sensitive, not extractable) and only asked to
encrypt or decrypt U with AES-GCM, whose tag makes a wrong key or an altered record fail rather
than yield a wrong U.  The library path, token label and PIN file are the data dir's
(config.json), never the database's.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from strongroom.crypto import token

log = logging.getLogger("strongroom.server.hsm")

_AAD = b"strongroom hsm seal v1"
_VERSION = b"\x01"


class HsmError(Exception):
    """The seal's key holder (an HSM, another server's transit key) could not be used; the
    message says why (never a PIN or a token)."""


@dataclass(frozen=True)
class ServerHsm:
    lib: str  # the PKCS#11 module, e.g. /usr/lib/softhsm/libsofthsm2.so
    token: str  # the token's label
    pin_file: str  # a file holding the user PIN (mode 0600)
    key_label: str = "strongroom-unseal"

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Any) -> ServerHsm:
        if (
            not isinstance(doc, dict)
            or not {"lib", "token", "pin_file"} <= set(doc)
            or not set(doc)
            <= {
                "lib",
                "token",
                "pin_file",
                "key_label",
            }
        ):
            raise ValueError("hsm must be an object with lib, token, pin_file and optionally key_label")
        return cls(**{k: str(v) for k, v in doc.items()})


class Pkcs11Link:
    """Wraps and unwraps U with one named key of one token (barrier.HsmLike)."""

    kind = "pkcs11"

    def __init__(self, cfg: ServerHsm) -> None:
        self.cfg = cfg

    def __repr__(self) -> str:
        return f"Pkcs11Link({self.cfg.lib}, token={self.cfg.token!r}, key={self.cfg.key_label!r})"

    def _session(self) -> Any:
        try:
            return token.open_session(self.cfg.lib, self.cfg.token, self.cfg.pin_file)
        except token.TokenError as e:
            raise HsmError(str(e)) from None

    def _key(self, session: Any, label: str, create: bool) -> Any:
        from pkcs11 import Attribute, KeyType, ObjectClass
        from pkcs11.exceptions import MultipleObjectsReturned, NoSuchKey

        try:
            return session.get_key(label=label, key_type=KeyType.AES, object_class=ObjectClass.SECRET_KEY)
        except NoSuchKey:
            if not create:
                raise HsmError(f"HSM token {self.cfg.token!r} has no key {label!r}") from None
        except MultipleObjectsReturned:
            raise HsmError(f"HSM token {self.cfg.token!r} has several keys labelled {label!r}") from None
        template = {Attribute.SENSITIVE: True, Attribute.EXTRACTABLE: False, Attribute.TOKEN: True}
        key = session.generate_key(KeyType.AES, 256, label=label, store=True, template=template)
        log.info("made AES-256 key %r in HSM token %r (not extractable)", label, self.cfg.token)
        return key

    def wrap(self, label: str, key: bytes) -> bytes:
        """U encrypted under the token's key ``label``, made there if the token lacks it."""
        from pkcs11 import Attribute, Mechanism
        from pkcs11.exceptions import PKCS11Error
        from pkcs11.mechanisms import GCMParams

        with self._session() as session:
            hkey = self._key(session, label, create=True)
            try:
                if hkey[Attribute.EXTRACTABLE] or not hkey[Attribute.SENSITIVE]:
                    raise HsmError(f"HSM key {label!r} is extractable: make a new one (another --hsm-key label)")
                nonce = os.urandom(12)
                out = hkey.encrypt(key, mechanism=Mechanism.AES_GCM, mechanism_param=GCMParams(nonce, _AAD, 128))
            except PKCS11Error as e:
                raise HsmError(f"HSM refused to encrypt: {type(e).__name__}") from None
        return _VERSION + nonce + bytes(out)

    def unwrap(self, label: str, wrapped: bytes) -> bytes:
        from pkcs11 import Mechanism
        from pkcs11.exceptions import PKCS11Error
        from pkcs11.mechanisms import GCMParams

        if len(wrapped) != 1 + 12 + 32 + 16 or wrapped[:1] != _VERSION:
            raise HsmError("the HSM seal record is malformed")
        with self._session() as session:
            hkey = self._key(session, label, create=False)
            try:
                out = hkey.decrypt(wrapped[13:], mechanism=Mechanism.AES_GCM, mechanism_param=GCMParams(wrapped[1:13], _AAD, 128))
            except PKCS11Error:
                raise HsmError(f"HSM key {label!r} does not open this server's seal (another key with that label?)") from None
        return bytes(out)


def check_pin_file(path: Path) -> None:
    """A PIN file others can read defeats the token's PIN."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise HsmError(f"HSM PIN file {path}: {e.strerror}") from None
    if mode & 0o077:
        raise HsmError(f"HSM PIN file {path} is readable by others (chmod 600 it)")
