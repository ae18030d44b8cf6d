"""The transit seal: the unseal key U encrypted by a transit key on another key server —
another Strongroom or an OpenBao/Vault server — through the Vault transit API
(``POST /v1/<mount>/encrypt/<key>``, ``.../decrypt/<key>``), so a fleet unseals from one guarded
server, as OpenBao's ``seal "transit"`` does.

The other server sees U only over TLS and never keeps it; what it keeps is its key.  The
address, key, token file and CA are the data dir's (config.json ``transit_seal``).  Every call is
bounded (connect and read timeouts, the answer's size) and fails with an HsmError that names
the server and the status, never the token.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import httpx

from strongroom.durable import read_regular
from strongroom.server.hsm import HsmError

if TYPE_CHECKING:
    from strongroom.server.datadir import ServerConfig

TIMEOUT = 10.0
MAX_ANSWER = 64 << 10
TOKEN_MAX = 4096


@dataclass(frozen=True)
class TransitSeal:
    address: str  # https://keys.example:8200
    key: str  # the transit key's name
    token_file: str  # a file holding a token allowed to encrypt and decrypt with it (mode 0600)
    mount: str = "transit"
    ca_file: str = ""  # the CA that signed the other server's certificate ("": the system's)

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Any) -> TransitSeal:
        fields = {"address", "key", "token_file", "mount", "ca_file"}
        if not isinstance(doc, dict) or not {"address", "key", "token_file"} <= set(doc) or not set(doc) <= fields:
            raise ValueError("transit_seal must be an object with address, key, token_file and optionally mount, ca_file")
        seal = cls(**{k: str(v) for k, v in doc.items()})
        url = httpx.URL(seal.address)
        loopback = url.host in ("127.0.0.1", "::1", "localhost")
        if url.scheme != "https" and not (url.scheme == "http" and loopback):
            raise ValueError("transit_seal.address must be an https:// URL (http only to this host's loopback)")
        return seal


def _token(path: str) -> str:
    try:
        if os.stat(path).st_mode & 0o077:
            raise HsmError(f"transit seal token file {path} is readable by others (chmod 600 it)")
        raw = read_regular(path, TOKEN_MAX)
    except OSError as e:
        raise HsmError(f"transit seal token file {path}: {e.strerror}") from None
    except ValueError as e:
        raise HsmError(f"transit seal token file {path}: {e}") from None
    token = raw.decode("utf-8", "replace").strip()
    if not token:
        raise HsmError(f"transit seal token file {path} is empty")
    return token


class TransitLink:
    """Wraps and unwraps U with the other server's transit key (barrier.HsmLike)."""

    kind = "transit"

    def __init__(self, seal: TransitSeal) -> None:
        self.seal = seal

    def __repr__(self) -> str:
        return f"TransitLink({self.seal.address}, key={self.seal.key!r})"

    def _call(self, op: str, label: str, body: dict[str, str]) -> dict[str, Any]:
        url = f"{self.seal.address.rstrip('/')}/v1/{self.seal.mount}/{op}/{label}"
        try:
            verify: Any = ssl.create_default_context(cafile=self.seal.ca_file) if self.seal.ca_file else True
        except OSError as e:
            raise HsmError(f"transit seal CA file {self.seal.ca_file}: {e.strerror or type(e).__name__}") from None
        try:
            with httpx.Client(verify=verify, timeout=TIMEOUT) as client:
                r = client.post(url, json=body, headers={"X-Vault-Token": _token(self.seal.token_file)})
        except httpx.HTTPError as e:
            raise HsmError(f"transit seal server {self.seal.address} unreachable ({type(e).__name__})") from None
        if r.status_code != 200 or len(r.content) > MAX_ANSWER:
            raise HsmError(f"transit seal server {self.seal.address} answered {r.status_code} to {op} with key {label!r}")
        try:
            data = r.json()["data"]
            if not isinstance(data, dict):
                raise TypeError
            return data
        except (ValueError, KeyError, TypeError):
            raise HsmError(f"transit seal server {self.seal.address} answered {op} in another shape than Vault's") from None

    def wrap(self, label: str, key: bytes) -> bytes:
        data = self._call("encrypt", label, {"plaintext": base64.b64encode(key).decode()})
        ciphertext = data.get("ciphertext")
        if not isinstance(ciphertext, str) or not ciphertext.startswith("vault:v"):
            raise HsmError(f"transit seal server {self.seal.address} gave no ciphertext")
        return ciphertext.encode()

    def unwrap(self, label: str, wrapped: bytes) -> bytes:
        data = self._call("decrypt", label, {"ciphertext": wrapped.decode("ascii", "replace")})
        try:
            key = base64.b64decode(str(data.get("plaintext", "")), validate=True)
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != 32:
            raise HsmError(f"transit seal server {self.seal.address} decrypted to something else than this server's key")
        return key


def link_for(config: ServerConfig) -> Any:
    """The data dir's key holder for an auto-unseal (an HSM or a transit seal), or None."""
    from strongroom.server.hsm import Pkcs11Link

    hsm = config.server_hsm()
    if hsm is not None:
        return Pkcs11Link(hsm)
    transit = config.server_transit()
    return None if transit is None else TransitLink(transit)
