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
import hmac
import json
import threading
import time
from dataclasses import dataclass, replace
from typing import Protocol

from strongroom.crypto import aead, kdf, sealedbox, shares, transit
from strongroom.server import repository as repo
from strongroom.server import vault_rows
from strongroom.server.sealconfig import AUTO_KINDS, SealConfig
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
    unseal_gen: int  # which U this is: a rekey or a seal migration makes another (follow_unseal_key)
    master_gen: int
    master: bytes
    audit: bytes


class NeedsMaterial(Exception):
    """The unseal key cannot be had from what was given; the message says what is needed."""


class HsmLike(Protocol):
    """What keeps U wrapped outside the database: an HSM (hsm.py) or another key server's
    transit key (transitseal.py)."""

    kind: str  # the seal record's kind: "pkcs11" or "transit"

    def wrap(self, label: str, key: bytes) -> bytes: ...

    def unwrap(self, label: str, wrapped: bytes) -> bytes: ...


@dataclass(frozen=True)
class Unlock:
    """What is brought to open the barrier: a passphrase, shares (a split's, or an HSM seal's
    recovery shares), or a link to the HSM that holds the wrapping key."""

    passphrase: str | None = None
    shares: tuple[str, ...] = ()
    hsm: HsmLike | None = None

    def __repr__(self) -> str:
        given = "<given>" if self.passphrase else None
        return f"Unlock(passphrase={given}, shares={len(self.shares)}, hsm={self.hsm is not None})"


def seal_config(tx: Tx) -> SealConfig:
    raw = repo.get_meta(tx, "seal")
    if raw is not None:
        return SealConfig.from_json(raw)
    params = repo.get_meta(tx, "seal_params")  # databases made before the seal record
    if params is None:
        raise ValueError("database is not initialized")
    return SealConfig("passphrase", argon2=json.loads(params))


def _unseal_key_for(config: SealConfig, unlock: Unlock) -> bytes:
    """U from the material given: shares.ShareError, NeedsMaterial, or an HSM's own error."""
    if unlock.shares:
        if not config.shares:
            raise NeedsMaterial(f"this server is unsealed with {config.describe()}, not shares")
        first = shares.parse(unlock.shares[0])
        if first.identifier != config.identifier:
            raise shares.ShareError("these shares belong to another split than this server's (a rekey made new ones?)")
        return shares.combine(list(unlock.shares))
    if config.kind == "passphrase":
        if not unlock.passphrase:
            raise NeedsMaterial("this server is unsealed with a passphrase")
        return kdf.passphrase_key(unlock.passphrase, kdf.Argon2Params.from_json(config.argon2))
    if config.kind in AUTO_KINDS and unlock.hsm is not None and unlock.hsm.kind == config.kind:
        return unlock.hsm.unwrap(config.wrap_key, config.wrapped)
    if config.kind in AUTO_KINDS:
        how = config.describe()
        raise NeedsMaterial(f"this server is unsealed with {how}: configure it in config.json or give recovery shares")
    raise NeedsMaterial(f"this server is unsealed with {config.describe()}, not a passphrase")


def _wrong(config: SealConfig, unlock: Unlock) -> str:
    if unlock.shares:
        return "these shares do not open this server"
    return "wrong passphrase" if config.kind == "passphrase" else f"the {config.kind} seal's key does not open this server"


def _initialize(tx: Tx, config: SealConfig, unseal: bytes) -> None:
    """Create the key hierarchy in a fresh database under the unseal key ``unseal``."""
    master = aead.new_key()
    repo.set_meta(tx, "seal", config.to_json())
    if config.kind == "passphrase":
        repo.set_meta(tx, "seal_params", json.dumps(config.argon2))
    repo.set_meta(tx, "master_gen", "1")
    repo.set_meta(tx, "seal_epoch", "1")
    repo.insert_master_key(tx, 1, aead.wrap_key(unseal, master, _master_aad(1)), time.time())
    repo.insert_system_key(tx, "audit", 1, aead.wrap_key(master, aead.new_key(), _syskey_aad("audit")))
    repo.insert_audit_head(tx)


def _load(tx: Tx, unseal: bytes, wrong: str = "wrong passphrase") -> _Keys:
    gen = int(repo.get_meta(tx, "master_gen") or "0")
    wrapped = repo.master_key(tx, gen)
    if wrapped is None:
        raise ValueError("master key record missing")
    try:
        master = aead.unwrap_key(unseal, wrapped, _master_aad(gen))
    except aead.DecryptionError:
        raise WrongPassphrase(wrong) from None
    audit_wrapped = repo.system_key(tx, "audit")
    if audit_wrapped is None:
        raise ValueError("audit key record missing")
    audit_key = aead.unwrap_key(master, audit_wrapped, _syskey_aad("audit"))
    unseal_gen = int(repo.get_meta(tx, "unseal_gen") or "0")
    return _Keys(unseal=unseal, unseal_gen=unseal_gen, master_gen=gen, master=master, audit=audit_key)


def _open(tx: Tx, unlock: Unlock) -> _Keys:
    config = seal_config(tx)
    return _load(tx, _unseal_key_for(config, unlock), _wrong(config, unlock))


def _new_seal(unlock: Unlock, n: int, m: int, hsm_key: str) -> tuple[SealConfig, bytes, list[str]]:
    """A seal record and its unseal key: from a new passphrase (Argon2id, fresh parameters); or
    a random key split ``m`` of ``n``; or a random key wrapped by the HSM (``hsm_key``), with
    ``n`` recovery shares when ``n`` > 0."""
    if unlock.passphrase:
        params = kdf.Argon2Params.fresh()
        return SealConfig("passphrase", argon2=params.to_json()), kdf.passphrase_key(unlock.passphrase, params), []
    unseal = aead.new_key()
    made = shares.split(unseal, n, m) if n else []
    ident = shares.parse(made[0]).identifier if made else -1
    if unlock.hsm is not None:
        wrapped = unlock.hsm.wrap(hsm_key, unseal)
        config = SealConfig(unlock.hsm.kind, shares=n, threshold=m, identifier=ident, wrap_key=hsm_key, wrapped=wrapped)
        return config, unseal, made
    if not made:
        raise NeedsMaterial("a new seal needs a passphrase, shares or an HSM")
    return SealConfig("shares", shares=n, threshold=m, identifier=ident), unseal, made


def open_backup_key(header: dict[str, object], unlock: Unlock) -> bytes:
    """A backup's key from its header and the unseal material the server had when it was made;
    WrongPassphrase if it does not open, ValueError if the header is malformed."""
    try:
        if "seal" in header:
            config = SealConfig.from_json(json.dumps(header["seal"]))
        else:  # backups made before the seal record
            config = SealConfig("passphrase", argon2=dict(header["seal_params"]))  # type: ignore[call-overload]
        gen = int(header["master_gen"])  # type: ignore[call-overload]
        wrapped_master = base64.b64decode(str(header["wrapped_master"]), validate=True)
        wrapped_key = base64.b64decode(str(header["wrapped_backup_key"]), validate=True)
    except (KeyError, TypeError, ValueError, binascii.Error) as e:
        raise ValueError("malformed backup header") from e
    unseal = _unseal_key_for(config, unlock)
    try:
        master = aead.unwrap_key(unseal, wrapped_master, _master_aad(gen))
        return aead.unwrap_key(master, wrapped_key, _BACKUP_KEY_AAD)
    except aead.DecryptionError:
        raise WrongPassphrase(f"{_wrong(config, unlock)}: not for this backup (or its header was altered)") from None


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

    def initialize(self, tx: Tx, unlock: Unlock, n: int = 0, m: int = 0, hsm_key: str = "") -> list[str]:
        """Create the key hierarchy in a fresh database and hold it (epoch 1): sealed as
        ``_new_seal`` says; returns the shares to hand out (none for a passphrase)."""
        config, unseal, made = _new_seal(unlock, n, m, hsm_key)
        _initialize(tx, config, unseal)
        self.unseal(tx, unseal, 1)
        return made

    def unseal_or_check(self, tx: Tx, unlock: Unlock, epoch: int) -> bool:
        """Unseal if sealed (True); if unsealed already, only prove the material (False).
        WrongPassphrase if it opens nothing; NeedsMaterial or shares.ShareError if it is not
        what this server is sealed with."""
        keys = _open(tx, unlock)
        with self._lock:
            if self._keys is not None:
                return False
            self._keys, self.epoch = keys, epoch
            return True

    def open_with(self, tx: Tx, unlock: Unlock, epoch: int) -> None:
        """Unseal with the operator's material (offline tools and the start of a server);
        WrongPassphrase if it opens nothing, ValueError if the database is not initialized."""
        keys = _open(tx, unlock)
        with self._lock:
            self._keys, self.epoch = keys, epoch

    def proves(self, tx: Tx, unlock: Unlock) -> bool:
        """Whether ``unlock`` gives this server's current unseal key (compared in constant time)."""
        self.follow_unseal_key(tx)
        try:
            key = _unseal_key_for(seal_config(tx), unlock)
        except (NeedsMaterial, shares.ShareError):
            return False
        return hmac.compare_digest(key, self._current().unseal)

    def reseal(self, tx: Tx, unlock: Unlock, n: int = 0, m: int = 0, hsm_key: str = "") -> list[str]:
        """Keep the master key under a new unseal key (rekey, seal migration): new shares, a
        new passphrase or the HSM.  Deposits are not touched; the other processes follow at
        their next tick (follow_unseal_key).  Returns the new shares.  One transaction: a crash
        leaves the old seal or the new one, whole."""
        self.follow_unseal_key(tx)
        old = self._current()
        config, unseal, made = _new_seal(unlock, n, m, hsm_key)
        repo.set_meta(tx, "seal", config.to_json())
        if config.kind == "passphrase":
            repo.set_meta(tx, "seal_params", json.dumps(config.argon2))
        repo.set_master_key(tx, old.master_gen, aead.wrap_key(unseal, old.master, _master_aad(old.master_gen)))
        wrapped = aead.wrap_key(old.master, unseal, _syskey_aad("unseal"))
        if repo.system_key(tx, "unseal") is None:
            repo.insert_system_key(tx, "unseal", old.master_gen, wrapped)
        else:
            repo.set_system_key(tx, "unseal", old.master_gen, wrapped)
        gen = old.unseal_gen + 1
        repo.set_meta(tx, "unseal_gen", str(gen))  # this process too follows once committed
        return made

    def follow_unseal_key(self, tx: Tx) -> None:
        """Pick up an unseal key another process put in place (reseal), from its copy under the
        master key."""
        keys = self._keys
        if keys is None:
            return
        gen = int(repo.get_meta(tx, "unseal_gen") or "0")
        if gen == keys.unseal_gen:
            return
        self.refresh(tx)
        keys = self._current()
        wrapped = repo.system_key(tx, "unseal")
        if wrapped is None:
            raise ValueError("unseal key record missing")
        unseal = aead.unwrap_key(keys.master, wrapped, _syskey_aad("unseal"))
        with self._lock:
            if self._keys is not None:
                self._keys = replace(self._keys, unseal=unseal, unseal_gen=gen)

    def seal_config(self, tx: Tx) -> SealConfig:
        return seal_config(tx)

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

    def system_secret(self, tx: Tx, name: str, create: bool) -> bytes | None:
        """A named 256-bit secret of the server's own (a Tang key's seed), wrapped under the
        master key as a system key; made at random when ``create`` and absent."""
        self.refresh(tx)
        keys = self._current()
        wrapped = repo.system_key(tx, name)
        if wrapped is not None:
            return aead.unwrap_key(keys.master, wrapped, _syskey_aad(name))
        if not create:
            return None
        secret = aead.new_key()
        repo.insert_system_key(tx, name, keys.master_gen, aead.wrap_key(keys.master, secret, _syskey_aad(name)))
        return secret

    def system_secret_names(self, tx: Tx, prefix: str) -> list[str]:
        return sorted(n for n, _w in repo.system_keys(tx) if n.startswith(prefix))

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
        config = seal_config(tx)
        return backup_key, {
            "seal": json.loads(config.to_json()),
            "seal_params": config.argon2,  # read by releases before the seal record
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
        self.follow_unseal_key(tx)
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
