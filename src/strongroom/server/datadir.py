"""The server's data directory: its config, TLS files, node key, audit head and admin profile."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from strongroom.server.headfile import HeadFile

if TYPE_CHECKING:
    from strongroom.server.hsm import ServerHsm
    from strongroom.server.transitseal import TransitSeal

DEFAULT_DEPOSIT_LIMIT = 1 << 20


class DataDirError(Exception):
    pass


@dataclass
class ServerConfig:
    db_url: str
    deposit_limit: int = DEFAULT_DEPOSIT_LIMIT
    names: list[str] = field(default_factory=lambda: ["localhost", "127.0.0.1"])
    entropy_mix: str | None = None  # a hardware source mixed into the entropy service (rng/mix.py)
    header_timeout: float = 10.0  # seconds from a request's first byte to the end of its headers
    body_timeout: float = 30.0  # seconds from the end of the headers to the end of the body
    handshake_timeout: float = 10.0  # seconds from a connection's acceptance to the end of its TLS handshake
    hsm: dict[str, str] | None = None  # the HSM that holds the seal's key (hsm.ServerHsm), if any
    transit_seal: dict[str, str] | None = None  # the key server whose transit key holds it (transitseal.py)
    kmip_idle_timeout: float = 300.0  # seconds a KMIP connection may wait between messages
    kmip_connections_per_client: int = 32  # open KMIP connections one client may hold in each worker

    def __post_init__(self) -> None:
        per_client = self.kmip_connections_per_client
        if isinstance(per_client, bool) or not isinstance(per_client, int) or not 1 <= per_client <= 10_000:
            raise ValueError("kmip_connections_per_client must be a whole number from 1 to 10000")
        for name in ("header_timeout", "body_timeout", "handshake_timeout", "kmip_idle_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 3600:
                raise ValueError(f"{name} must be a number of seconds in (0, 3600]")
        if self.hsm is not None:
            from strongroom.server.hsm import ServerHsm

            ServerHsm.from_json(self.hsm)  # refused at load, not at the first unseal
        if self.transit_seal is not None:
            from strongroom.server.transitseal import TransitSeal

            TransitSeal.from_json(self.transit_seal)

    def server_hsm(self) -> ServerHsm | None:
        from strongroom.server.hsm import ServerHsm

        return None if self.hsm is None else ServerHsm.from_json(self.hsm)

    def server_transit(self) -> TransitSeal | None:
        from strongroom.server.transitseal import TransitSeal

        return None if self.transit_seal is None else TransitSeal.from_json(self.transit_seal)


class DataDir:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).absolute()

    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def tls(self) -> Path:
        return self.path / "tls"

    @property
    def ca_file(self) -> Path:
        return self.tls / "ca.pem"

    @property
    def node_key_path(self) -> Path:
        return self.path / "node.key"

    @property
    def admin_profile(self) -> Path:
        return self.path / "admin"

    @property
    def head_file(self) -> HeadFile:
        return HeadFile(self.path / "audit.head")

    def default_sqlite_url(self) -> str:
        return f"sqlite:///{self.path / 'strongroom.db'}"

    def is_empty(self) -> bool:
        return not self.path.exists() or not any(self.path.iterdir())

    def create(self, config: ServerConfig) -> None:
        if not self.is_empty():
            raise DataDirError(f"{self.path} is not empty")
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.path, 0o700)
        self.write_config(config)
        fd = os.open(self.node_key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))

    def write_config(self, config: ServerConfig) -> None:
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(config.__dict__, indent=2) + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.config_path)

    def load_config(self) -> ServerConfig:
        try:
            raw = json.loads(self.config_path.read_text())
            return ServerConfig(**raw)
        except FileNotFoundError:
            raise DataDirError(
                f"{self.path} is not a Strongroom data dir (no config.json); run 'strongroom server init'"
            ) from None
        except (ValueError, TypeError) as e:
            raise DataDirError(f"{self.config_path} is corrupt: {e}") from None

    def node_key(self) -> bytes:
        try:
            key = self.node_key_path.read_bytes()
        except FileNotFoundError:
            raise DataDirError(f"{self.node_key_path} is missing") from None
        if len(key) != 32:
            raise DataDirError(f"{self.node_key_path} is corrupt")
        return key
