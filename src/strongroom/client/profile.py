"""A client profile: server URLs, client id, the private identity and the server CA.

Layout of the profile directory (mode 0700):
  profile.json   {"version": 1, "servers": [...], "client_id", "name", "org", "role"}  (0600)
  identity.key   the Ed25519 private key, base64url, never sent anywhere        (0600)
  ca.pem         the CA that signed the server's TLS certificate
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from strongroom.client.errors import ProfileError
from strongroom.crypto.identity import Identity, b64u, unb64u
from strongroom.durable import fsync_dir, write_synced

DEFAULT_PROFILE = Path("~/.config/strongroom")


def default_path() -> Path:
    env = os.environ.get("STRONGROOM_PROFILE")
    return Path(env) if env else DEFAULT_PROFILE.expanduser()


def _write_private(path: Path, text: str, fresh: bool = False) -> None:
    """Write ``path`` (mode 0600) and fsync it.  An existing profile's file is replaced through
    a temporary file and a rename, so a crash leaves the old one or the new one; in a directory
    this call just created (``fresh``) there is nothing to keep, and the file is written in place."""
    if fresh:
        write_synced(path, text.encode(), os.O_EXCL)
        return
    tmp = path.with_name(path.name + ".tmp")
    write_synced(tmp, text.encode(), os.O_TRUNC)
    os.replace(tmp, path)


@dataclass
class Profile:
    path: Path
    servers: list[str]
    client_id: str
    identity: Identity
    name: str = ""
    org: str | None = None
    role: str = "client"
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def ca_file(self) -> Path | None:
        ca = self.path / "ca.pem"
        return ca if ca.exists() else None

    def save(self, ca_pem: bytes | None) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            os.mkdir(self.path, 0o700)
            fresh = True  # a new, empty directory: nothing in it to replace atomically
        except FileExistsError:
            fresh = False
        os.chmod(self.path, 0o700)  # exactly 0700, whatever the umask or an older directory's mode
        if ca_pem is not None:
            _write_private(self.path / "ca.pem", ca_pem.decode(), fresh)
        _write_private(self.path / "identity.key", b64u(self.identity.private_bytes()) + "\n", fresh)
        doc = {
            "version": 1,
            "servers": self.servers,
            "client_id": self.client_id,
            "name": self.name,
            "org": self.org,
            "role": self.role,
        }
        _write_private(self.path / "profile.json", json.dumps(doc, indent=2) + "\n", fresh)
        # The new names above are durable only once the directory is (and a new directory's own
        # name once its parent is): a registered identity must survive a crash right after
        # registration returns.
        fsync_dir(self.path)
        if fresh:
            fsync_dir(self.path.parent)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> Profile:
        p = Path(path) if path is not None else default_path()
        try:
            doc = json.loads((p / "profile.json").read_text())
            key = unb64u((p / "identity.key").read_text().strip())
            identity = Identity.from_private_bytes(key)
            servers = [str(s) for s in doc["servers"]]
            if not servers:
                raise ValueError("no server URL")
            return cls(
                p,
                servers,
                str(doc["client_id"]),
                identity,
                str(doc.get("name", "")),
                doc.get("org"),
                str(doc.get("role", "client")),
            )
        except FileNotFoundError:
            raise ProfileError(f"no client profile at {p}: run 'strongroom register' or pass --profile") from None
        except (ValueError, KeyError, TypeError) as e:
            raise ProfileError(f"client profile at {p} is unreadable: {type(e).__name__}") from None
