"""The encryption barrier: the only code that sees the unseal key, master keys and data keys,
and the storage every backend is handed for the sealed tables.

Key hierarchy (docs/OPERATIONS.md, "Keys"):
  passphrase --Argon2id--> unseal key U --wraps--> master key M (one live generation)
  M --wraps--> a random data key per deposit version --AES-256-GCM--> deposit content
  M --wraps--> system keys (the audit MAC key), transit key versions, a backup's key
Only this module derives U from a passphrase, unwraps M, or reads, writes or deletes the rows of
``deposit_versions``, ``transit_key_versions``, ``master_keys`` and ``system_keys`` (through
the repository's functions for them; tests/server/test_barrier_owns_keys.py holds every other
module to it).  Backends pass plaintext in and get plaintext out.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from dataclasses import dataclass

from strongroom.crypto import aead, kdf, sealedbox, transit
from strongroom.server import repository as repo
from strongroom.server import vault_rows
from strongroom.server.storage import Tx


class SealedError(Exception):
    """The server holds no master key yet."""


class WrongPassphrase(Exception):
    pass


_BACKUP_KEY_AAD = b"strongroom backup key v1"


def _master_aad(gen: int) -> bytes:
    return f"strongroom master v1\0{gen}".encode()


def _syskey_aad(name: str) -> bytes:
    return f"strongroom syskey v1\0{name}".encode()


def dk_aad(deposit_id: int, owner: str, version: int) -> bytes:
    return f"strongroom dk v1\0{deposit_id}\0{owner}\0{version}".encode()


def _content_aad(deposit_id: int, owner: str, version: int) -> bytes:
    return f"strongroom deposit v1\0{deposit_id}\0{owner}\0{version}".encode()


def transit_aad(key_id: int, owner: str, version: int, kind: str) -> bytes:
    return f"strongroom transit v1\0{key_id}\0{owner}\0{version}\0{kind}".encode()


@dataclass(frozen=True)
class _Keys:
    unseal: bytes
    master_gen: int
    master: bytes
    audit: bytes


def _initialize(tx: Tx, passphrase: str) -> bytes:
    """Create the key hierarchy in a fresh database; returns the unseal key."""
    params = kdf.Argon2Params.fresh()
    unseal = kdf.passphrase_key(passphrase, params)
    master = aead.new_key()
    repo.set_meta(tx, "seal_params", json.dumps(params.to_json()))
    repo.set_meta(tx, "master_gen", "1")
    repo.set_meta(tx, "seal_epoch", "1")
    repo.insert_master_key(tx, 1, aead.wrap_key(unseal, master, _master_aad(1)), time.time())
    repo.insert_system_key(tx, "audit", 1, aead.wrap_key(master, aead.new_key(), _syskey_aad("audit")))
    repo.insert_audit_head(tx)
    return unseal


def _derive_unseal_key(tx: Tx, passphrase: str) -> bytes:
    raw = repo.get_meta(tx, "seal_params")
    if raw is None:
        raise ValueError("database is not initialized")
    unseal = kdf.passphrase_key(passphrase, kdf.Argon2Params.from_json(json.loads(raw)))
    _load(tx, unseal)  # proves the passphrase
    return unseal


def _load(tx: Tx, unseal: bytes) -> _Keys:
    gen = int(repo.get_meta(tx, "master_gen") or "0")
    wrapped = repo.master_key(tx, gen)
    if wrapped is None:
        raise ValueError("master key record missing")
    try:
        master = aead.unwrap_key(unseal, wrapped, _master_aad(gen))
    except aead.DecryptionError:
        raise WrongPassphrase("wrong passphrase") from None
    audit_wrapped = repo.system_key(tx, "audit")
    if audit_wrapped is None:
        raise ValueError("audit key record missing")
    audit_key = aead.unwrap_key(master, audit_wrapped, _syskey_aad("audit"))
    return _Keys(unseal=unseal, master_gen=gen, master=master, audit=audit_key)


def open_backup_key(header: dict[str, object], passphrase: str) -> bytes:
    """A backup's key from its header and the passphrase the server had when it was made;
    WrongPassphrase if it does not open, ValueError if the header is malformed."""
    try:
        params = kdf.Argon2Params.from_json(header["seal_params"])  # type: ignore[arg-type]
        gen = int(header["master_gen"])  # type: ignore[call-overload]
        wrapped_master = base64.b64decode(str(header["wrapped_master"]), validate=True)
        wrapped_key = base64.b64decode(str(header["wrapped_backup_key"]), validate=True)
    except (KeyError, TypeError, ValueError, binascii.Error) as e:
        raise ValueError("malformed backup header") from e
    unseal = kdf.passphrase_key(passphrase, params)
    try:
        master = aead.unwrap_key(unseal, wrapped_master, _master_aad(gen))
        return aead.unwrap_key(master, wrapped_key, _BACKUP_KEY_AAD)
    except aead.DecryptionError:
        raise WrongPassphrase("wrong passphrase for this backup (or its header was altered)") from None


class Barrier:
    def __init__(self) -> None:
        self._keys: _Keys | None = None
        self._lock = threading.Lock()
        self.epoch = 0  # seal epoch these keys were granted for

    @property
    def sealed(self) -> bool:
        return self._keys is None

    def unseal(self, tx: Tx, unseal_key: bytes, epoch: int) -> None:
        keys = _load(tx, unseal_key)
        with self._lock:
            self._keys, self.epoch = keys, epoch

    def initialize(self, tx: Tx, passphrase: str) -> None:
        """Create the key hierarchy in a fresh database and hold it (epoch 1)."""
        self.unseal(tx, _initialize(tx, passphrase), 1)

    def unseal_or_check(self, tx: Tx, passphrase: str, epoch: int) -> bool:
        """Unseal with the passphrase if sealed (True); if unsealed already, only prove the
        passphrase (False).  WrongPassphrase if it opens nothing."""
        keys = _load(tx, _derive_unseal_key(tx, passphrase))
        with self._lock:
            if self._keys is not None:
                return False
            self._keys, self.epoch = keys, epoch
            return True

    def unseal_with_passphrase(self, tx: Tx, passphrase: str, epoch: int) -> None:
        """Derive U from the passphrase (Argon2id, the database's parameters) and unseal;
        WrongPassphrase if it opens nothing, ValueError if the database is not initialized."""
        self.unseal(tx, _derive_unseal_key(tx, passphrase), epoch)

    def seal(self) -> None:
        with self._lock:
            self._keys = None

    def grant(self, public: bytes, aad: bytes) -> bytes:
        """The unseal key sealed to another server process's box key (nodes.py): the only form
        in which it leaves this object."""
        return sealedbox.seal_to(public, self._current().unseal, aad)

    def unseal_with_grant(self, tx: Tx, box: sealedbox.BoxKey, grant: bytes, aad: bytes, epoch: int) -> None:
        """Unseal with a grant another process sealed to ``box`` (aead.DecryptionError if it does
        not open, WrongPassphrase if what it holds opens nothing)."""
        self.unseal(tx, box.open(grant, aad), epoch)

    def _current(self) -> _Keys:
        keys = self._keys
        if keys is None:
            raise SealedError("sealed")
        return keys

    def refresh(self, tx: Tx) -> None:
        """Pick up a master key rotated by another process."""
        keys = self._current()
        gen = int(repo.get_meta(tx, "master_gen") or "0")
        if gen != keys.master_gen:
            fresh = _load(tx, keys.unseal)
            with self._lock:
                if self._keys is not None:
                    self._keys = fresh

    def _keys_for(self, tx: Tx, gen: int) -> _Keys:
        keys = self._current()
        if keys.master_gen != gen:
            self.refresh(tx)
            keys = self._current()
            if keys.master_gen != gen:
                raise aead.DecryptionError("data key is wrapped under a retired master key")
        return keys

    def audit_key(self) -> bytes:
        return self._current().audit

    # -- deposits ---------------------------------------------------------------------
    def write_version(self, tx: Tx, deposit_id: int, owner: str, version: int, plaintext: bytes, created: float) -> None:
        """Store a new deposit version sealed under a fresh data key, itself wrapped under the
        current master key.  The caller holds the audit-head lock, so the generation read here
        is current."""
        self.refresh(tx)
        keys = self._current()
        dk = aead.new_key()
        repo.insert_version(
            tx,
            deposit_id,
            version,
            keys.master_gen,
            aead.wrap_key(keys.master, dk, dk_aad(deposit_id, owner, version)),
            aead.seal(dk, plaintext, _content_aad(deposit_id, owner, version)),
            created,
        )

    def read_version(self, tx: Tx, deposit_id: int, owner: str, version: int) -> bytes:
        """A deposit version's plaintext; aead.DecryptionError if its row is missing or was
        altered (moved to another deposit, owner or version included)."""
        row = repo.version(tx, deposit_id, version)
        if row is None:
            raise aead.DecryptionError("version row missing")
        gen, wrapped, ciphertext = row
        keys = self._keys_for(tx, gen)
        dk = aead.unwrap_key(keys.master, wrapped, dk_aad(deposit_id, owner, version))
        return aead.open_(dk, ciphertext, _content_aad(deposit_id, owner, version))

    def version_times(self, tx: Tx, deposit_id: int) -> dict[int, float]:
        """Version -> creation time of the versions a deposit still holds (no key material)."""
        return repo.version_times(tx, deposit_id)

    # -- destruction ----------------------------------------------------------------------
    def destroy_version(self, tx: Tx, deposit_id: int, version: int) -> None:
        """A version's wrapped data key and ciphertext deleted: nothing left to open it with."""
        repo.delete_version(tx, deposit_id, version)

    def destroy_versions_below(self, tx: Tx, deposit_id: int, version: int) -> None:
        """Every version of a deposit older than ``version`` deleted (a KV secret's pruning)."""
        repo.delete_versions_below(tx, deposit_id, version)

    def destroy_deposit(self, tx: Tx, deposit_id: int) -> None:
        """A deposit with every version, reader and KV state."""
        repo.delete_deposit(tx, deposit_id)

    def destroy_transit_key(self, tx: Tx, key_id: int) -> None:
        """A transit key with every version's material."""
        vault_rows.delete_transit_key(tx, key_id)

    # -- backups ----------------------------------------------------------------------------
    def new_backup_key(self, tx: Tx) -> tuple[bytes, dict[str, object]]:
        """A fresh key for one backup's frames, and what its header carries to recover it with
        the passphrase alone (backup.py): the KDF parameters, the master key wrapped under U,
        and the backup key wrapped under the master key."""
        keys = self._current()
        wrapped_master = repo.master_key(tx, keys.master_gen)
        if wrapped_master is None:
            raise ValueError("the database has no master key record")
        backup_key = aead.new_key()
        return backup_key, {
            "seal_params": json.loads(repo.get_meta(tx, "seal_params") or "{}"),
            "master_gen": keys.master_gen,
            "wrapped_master": base64.b64encode(wrapped_master).decode(),
            "wrapped_backup_key": base64.b64encode(aead.wrap_key(keys.master, backup_key, _BACKUP_KEY_AAD)).decode(),
        }

    # -- transit keys ---------------------------------------------------------------------
    def new_transit_version(self, tx: Tx, key_id: int, owner: str, version: int, kind: str, created: float) -> None:
        """A fresh random version of a transit key, stored wrapped under the master key."""
        keys = self._current()
        wrapped = aead.wrap_key(keys.master, transit.new_material(), transit_aad(key_id, owner, version, kind))
        vault_rows.insert_transit_version(tx, key_id, version, keys.master_gen, wrapped, created)

    def find_transit_key(
        self, tx: Tx, owner: str, name: str, version: int | None
    ) -> tuple[vault_rows.TransitKeyRow, tuple[int, int, bytes] | None] | None:
        """A transit key and one version's sealed row (the latest when ``version`` is None), read
        in one statement; the row is only for handing back to ``transit_keyring``."""
        return vault_rows.transit_key_and_version(tx, owner, name, version)

    def transit_keyring(
        self,
        tx: Tx,
        key_id: int,
        owner: str,
        kind: str,
        derived: bool,
        versions: list[int],
        rows: list[tuple[int, int, bytes]] | None = None,
    ) -> transit.Keyring:
        """The named versions of a transit key, unwrapped into a keyring that can use them but not
        give them out (aead.DecryptionError if a row was altered or moved); ``rows``: those
        versions' rows when the caller has read them already."""
        materials = {}
        for version, gen, wrapped in rows if rows is not None else vault_rows.transit_versions(tx, key_id, versions):
            keys = self._keys_for(tx, gen)
            materials[version] = aead.unwrap_key(keys.master, wrapped, transit_aad(key_id, owner, version, kind))
        return transit.Keyring(kind, materials, derived)

    def rotate(self, tx: Tx) -> int:
        """Re-wrap every data key, transit key and system key under a new master key; returns the
        new generation.

        Must run inside Store.action(), whose lock keeps concurrent puts from wrapping
        under the old key while this runs.  This process adopts the new key through
        refresh() once the transaction has committed, like every other process; a
        rolled-back rotation changes nothing.
        """
        self.refresh(tx)
        old = self._current()
        new_gen = old.master_gen + 1
        new_master = aead.new_key()
        repo.insert_master_key(tx, new_gen, aead.wrap_key(old.unseal, new_master, _master_aad(new_gen)), time.time())
        for deposit_id, version, wrapped, owner in repo.version_keys(tx):
            aad = dk_aad(deposit_id, owner, version)
            dk = aead.unwrap_key(old.master, wrapped, aad)
            repo.set_version_key(tx, deposit_id, version, new_gen, aead.wrap_key(new_master, dk, aad))
        for key_id, version, wrapped, owner, kind in vault_rows.transit_version_keys(tx):
            aad = transit_aad(key_id, owner, version, kind)
            material = aead.unwrap_key(old.master, wrapped, aad)
            vault_rows.set_transit_version_key(tx, key_id, version, new_gen, aead.wrap_key(new_master, material, aad))
        for name, wrapped in repo.system_keys(tx):
            key = aead.unwrap_key(old.master, wrapped, _syskey_aad(name))
            repo.set_system_key(tx, name, new_gen, aead.wrap_key(new_master, key, _syskey_aad(name)))
        repo.keep_only_master_key(tx, new_gen)
        repo.set_meta(tx, "master_gen", str(new_gen))
        return new_gen
