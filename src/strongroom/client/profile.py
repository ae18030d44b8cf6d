"""A client profile: server URLs, client id, the private identity and the server CA.

Layout of the profile directory (mode 0700):
  profile.json   {"version": 1, "servers": [...], "client_id", "name", "org", "role", "key"}  (0600)
  identity.key   the Ed25519 private key, base64url, never sent anywhere        (0600)
                 (encrypted under a passphrase, or absent when the key is in a token: "key"
                 names the store, client/keystore.py)
  ca.pem         the CA that signed the server's TLS certificate
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strongroom.client.errors import ProfileError
from strongroom.client.keystore import (
    ENCRYPTED_PREFIX,
    KeyStoreError,
    TokenIdentity,
    TokenKey,
    decrypt_key,
    encrypt_key,
    passphrase_from_env,
)
from strongroom.crypto.identity import Identity, Signer, b64u, unb64u
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
class KeyStore:
    """Where a new or protected profile keeps its key: a file (``passphrase`` None, ``token``
    None), a file encrypted under ``passphrase``, or the PKCS#11 ``token``."""

    passphrase: str | None = None
    token: TokenKey | None = None

    def new_identity(self) -> Signer:
        if self.token is not None:
            return TokenIdentity.generate(self.token)
        return Identity.generate()

    def __repr__(self) -> str:
        return f"KeyStore(passphrase={'<given>' if self.passphrase else None}, token={self.token})"


@dataclass
class Profile:
    path: Path
    servers: list[str]
    client_id: str
    identity: Signer
    name: str = ""
    org: str | None = None
    role: str = "client"
    extra: dict[str, object] = field(default_factory=dict)
    key_store: KeyStore = field(default_factory=KeyStore)

    def _key_entry(self) -> tuple[dict[str, str], str | None]:
        """profile.json's "key", and identity.key's text (None: no file)."""
        public = b64u(self.identity.public_bytes())
        store = self.key_store
        if store.token is not None:
            return {**store.token.to_json(), "public": public}, None
        if not isinstance(self.identity, Identity):
            raise ProfileError("a key in a token cannot be written to a file")
        if store.passphrase is not None:
            return {"store": "passphrase", "public": public}, encrypt_key(self.identity, store.passphrase)
        return {"store": "file", "public": public}, b64u(self.identity.private_bytes())

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
        entry, key_text = self._key_entry()
        if key_text is not None:
            _write_private(self.path / "identity.key", key_text + "\n", fresh)
        doc = {
            "version": 1,
            "servers": self.servers,
            "client_id": self.client_id,
            "name": self.name,
            "org": self.org,
            "role": self.role,
            "key": entry,
        }
        _write_private(self.path / "profile.json", json.dumps(doc, indent=2) + "\n", fresh)
        if key_text is None and (self.path / "identity.key").exists():
            _shred(self.path / "identity.key")  # the key now lives in the token alone
        # The new names above are durable only once the directory is (and a new directory's own
        # name once its parent is): a registered identity must survive a crash right after
        # registration returns.
        fsync_dir(self.path)
        if fresh:
            fsync_dir(self.path.parent)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, key_passphrase: Callable[[], str] | None = None) -> Profile:
        """``key_passphrase``: asked for an encrypted key when STRONGROOM_KEY_PASSPHRASE_FILE and
        STRONGROOM_KEY_PASSPHRASE are not set (the CLI prompts on a terminal)."""
        p = Path(path) if path is not None else default_path()
        try:
            doc = json.loads((p / "profile.json").read_text())
            entry = doc.get("key") or {"store": "file"}
            identity, store = _open_key(p, entry, key_passphrase)
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
                key_store=store,
            )
        except KeyStoreError as e:
            raise ProfileError(f"client profile at {p}: {e}") from None
        except FileNotFoundError:
            raise ProfileError(f"no client profile at {p}: run 'strongroom register' or pass --profile") from None
        except (ValueError, KeyError, TypeError) as e:
            raise ProfileError(f"client profile at {p} is unreadable: {type(e).__name__}") from None


def _open_key(p: Path, entry: dict[str, Any], key_passphrase: Callable[[], str] | None) -> tuple[Signer, KeyStore]:
    kind = entry.get("store", "file")
    if kind == "pkcs11":
        ref = TokenKey.from_json(entry)
        public = unb64u(str(entry["public"])) if "public" in entry else None
        return TokenIdentity(ref, public), KeyStore(token=ref)
    text = (p / "identity.key").read_text().strip()
    if kind == "passphrase" or text.startswith(ENCRYPTED_PREFIX):
        passphrase = passphrase_from_env() or (key_passphrase() if key_passphrase is not None else None)
        if not passphrase:
            raise KeyStoreError("its key is encrypted: set STRONGROOM_KEY_PASSPHRASE_FILE (or run on a terminal)")
        return decrypt_key(text, passphrase), KeyStore(passphrase=passphrase)
    if kind != "file":
        raise KeyStoreError(f"unknown key store {kind!r} (a newer release made this profile?)")
    return Identity.from_private_bytes(unb64u(text)), KeyStore()


def _shred(path: Path) -> None:
    """Overwrite a key file before removing it (a best effort: a copy-on-write or journaling
    filesystem may keep the old blocks)."""
    try:
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.write(os.urandom(max(size, 64)))
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        pass
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)
