"""How a server's unseal key U is kept: the ``seal`` record in the database's meta table.

Three kinds (docs/OPERATIONS.md, "Sealing"):
  passphrase  U = Argon2id(passphrase); the parameters are kept here (older databases keep them
              in ``seal_params`` and have no ``seal`` record)
  shares      U is random, split M of N into SLIP-39 shares (crypto/shares.py); only the split's
              identifier and counts are kept
  pkcs11      U is random, encrypted by a non-extractable key in an HSM; the key's label and U's
              ciphertext are kept, and optional recovery shares as for ``shares``
  transit     U is random, encrypted by a transit key on another key server (Strongroom or
              OpenBao/Vault); the key's name and U's ciphertext are kept, and recovery shares
Which HSM library to load, which token, its PIN, and which server holds the transit key with
what token are the data dir's (config.json), never the database's: whoever can write the
database must not choose code for the server to load or a server to send U to.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

KINDS = ("passphrase", "shares", "pkcs11", "transit")
AUTO_KINDS = ("pkcs11", "transit")  # U wrapped by a key held elsewhere: the server unseals itself


class SealConfigError(ValueError):
    pass


@dataclass(frozen=True)
class SealConfig:
    kind: str
    argon2: dict[str, Any] = field(default_factory=dict)  # passphrase: the KDF's parameters
    shares: int = 0  # shares: the split; pkcs11: recovery shares (0: none)
    threshold: int = 0
    identifier: int = -1  # the SLIP-39 identifier every share of the split carries
    wrap_key: str = ""  # pkcs11: label of the wrapping key in the token; transit: the key's name
    wrapped: bytes = b""  # pkcs11, transit: U as the key's holder encrypted it

    def to_json(self) -> str:
        doc: dict[str, Any] = {"kind": self.kind}
        if self.kind == "passphrase":
            doc["argon2"] = self.argon2
        if self.shares:
            doc.update(shares=self.shares, threshold=self.threshold, identifier=self.identifier)
        if self.kind in AUTO_KINDS:
            doc.update(wrap_key=self.wrap_key, wrapped=base64.b64encode(self.wrapped).decode())
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SealConfig:
        try:
            doc = json.loads(text)
            kind = str(doc["kind"])
            if kind not in KINDS:
                raise SealConfigError(f"unknown seal kind {kind!r}: this database was sealed by a newer release")
            cfg = cls(
                kind,
                argon2=dict(doc.get("argon2", {})),
                shares=int(doc.get("shares", 0)),
                threshold=int(doc.get("threshold", 0)),
                identifier=int(doc.get("identifier", -1)),
                wrap_key=str(doc.get("wrap_key", "")),
                wrapped=base64.b64decode(doc.get("wrapped", ""), validate=True),
            )
        except SealConfigError:
            raise
        except (KeyError, TypeError, ValueError, binascii.Error) as e:
            raise SealConfigError("the database's seal record is malformed") from e
        if kind == "shares" and not 1 <= cfg.threshold <= cfg.shares:
            raise SealConfigError("the database's seal record names shares without their counts")
        return cfg

    def describe(self) -> str:
        """One line for people: how this server is unsealed."""
        if self.kind == "passphrase":
            return "a passphrase"
        if self.kind == "shares":
            return f"{self.threshold} of {self.shares} shares"
        recovery = f"; recovery: {self.threshold} of {self.shares} shares" if self.shares else "; no recovery shares"
        holder = "an HSM key" if self.kind == "pkcs11" else "another server's transit key"
        return f"{holder} ({self.wrap_key}){recovery}"
