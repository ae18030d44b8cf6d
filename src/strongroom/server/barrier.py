"""The encryption barrier: the only code that sees the unseal key, master keys and data keys.

Key hierarchy (docs/OPERATIONS.md, "Keys"):
  passphrase --Argon2id--> unseal key U --wraps--> master key M (one live generation)
  M --wraps--> a random data key per deposit version --AES-256-GCM--> deposit content
  M --wraps--> system keys (the audit MAC key)
Handlers never hold these; they pass sealed rows in and get plaintext out.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from strongroom.crypto import aead, kdf
from strongroom.server import storage as st


class SealedError(Exception):
    """The server holds no master key yet."""


class WrongPassphrase(Exception):
    pass


def _master_aad(gen: int) -> bytes:
    return f"strongroom master v1\0{gen}".encode()


def _syskey_aad(name: str) -> bytes:
    return f"strongroom syskey v1\0{name}".encode()


def _dk_aad(deposit_id: int, owner: str, version: int) -> bytes:
    return f"strongroom dk v1\0{deposit_id}\0{owner}\0{version}".encode()


def _content_aad(deposit_id: int, owner: str, version: int) -> bytes:
    return f"strongroom deposit v1\0{deposit_id}\0{owner}\0{version}".encode()


@dataclass(frozen=True)
class _Keys:
    unseal: bytes
    master_gen: int
    master: bytes
    audit: bytes


def initialize(conn: Connection, passphrase: str) -> bytes:
    """Create the key hierarchy in a fresh database; returns the unseal key."""
    params = kdf.Argon2Params.fresh()
    unseal = kdf.passphrase_key(passphrase, params)
    master = aead.new_key()
    now = time.time()
    st.set_meta(conn, "seal_params", json.dumps(params.to_json()))
    st.set_meta(conn, "master_gen", "1")
    st.set_meta(conn, "seal_epoch", "1")
    conn.execute(st.master_keys.insert().values(generation=1, wrapped=aead.wrap_key(unseal, master, _master_aad(1)), created=now))
    audit_key = aead.new_key()
    conn.execute(
        st.system_keys.insert().values(name="audit", master_gen=1, wrapped=aead.wrap_key(master, audit_key, _syskey_aad("audit")))
    )
    conn.execute(st.audit_head.insert().values(id=1, seq=0, mac=bytes(32)))
    return unseal


def derive_unseal_key(conn: Connection, passphrase: str) -> bytes:
    raw = st.get_meta(conn, "seal_params")
    if raw is None:
        raise ValueError("database is not initialized")
    unseal = kdf.passphrase_key(passphrase, kdf.Argon2Params.from_json(json.loads(raw)))
    _load(conn, unseal)  # proves the passphrase
    return unseal


def _load(conn: Connection, unseal: bytes) -> _Keys:
    gen = int(st.get_meta(conn, "master_gen") or "0")
    wrapped = conn.execute(select(st.master_keys.c.wrapped).where(st.master_keys.c.generation == gen)).scalar_one_or_none()
    if wrapped is None:
        raise ValueError("master key record missing")
    try:
        master = aead.unwrap_key(unseal, wrapped, _master_aad(gen))
    except aead.DecryptionError:
        raise WrongPassphrase("wrong passphrase") from None
    row = conn.execute(select(st.system_keys).where(st.system_keys.c.name == "audit")).one()
    audit_key = aead.unwrap_key(master, row.wrapped, _syskey_aad("audit"))
    return _Keys(unseal=unseal, master_gen=gen, master=master, audit=audit_key)


class Barrier:
    def __init__(self) -> None:
        self._keys: _Keys | None = None
        self._lock = threading.Lock()
        self.epoch = 0  # seal epoch these keys were granted for

    @property
    def sealed(self) -> bool:
        return self._keys is None

    def unseal(self, conn: Connection, unseal_key: bytes, epoch: int) -> None:
        keys = _load(conn, unseal_key)
        with self._lock:
            self._keys, self.epoch = keys, epoch

    def seal(self) -> None:
        with self._lock:
            self._keys = None

    def unseal_key(self) -> bytes:
        return self._current().unseal

    def _current(self) -> _Keys:
        keys = self._keys
        if keys is None:
            raise SealedError("sealed")
        return keys

    def refresh(self, conn: Connection) -> None:
        """Pick up a master key rotated by another process."""
        keys = self._current()
        gen = int(st.get_meta(conn, "master_gen") or "0")
        if gen != keys.master_gen:
            fresh = _load(conn, keys.unseal)
            with self._lock:
                if self._keys is not None:
                    self._keys = fresh

    def _keys_for(self, conn: Connection, gen: int) -> _Keys:
        keys = self._current()
        if keys.master_gen != gen:
            self.refresh(conn)
            keys = self._current()
            if keys.master_gen != gen:
                raise aead.DecryptionError("data key is wrapped under a retired master key")
        return keys

    def audit_key(self) -> bytes:
        return self._current().audit

    # -- deposits ---------------------------------------------------------------------
    def seal_deposit(
        self, conn: Connection, deposit_id: int, owner: str, version: int, plaintext: bytes
    ) -> tuple[int, bytes, bytes]:
        """Returns (master generation, wrapped data key, ciphertext) for a new version."""
        self.refresh(conn)
        keys = self._current()
        dk = aead.new_key()
        wrapped = aead.wrap_key(keys.master, dk, _dk_aad(deposit_id, owner, version))
        return keys.master_gen, wrapped, aead.seal(dk, plaintext, _content_aad(deposit_id, owner, version))

    def open_deposit(
        self, conn: Connection, deposit_id: int, owner: str, version: int, gen: int, wrapped: bytes, ciphertext: bytes
    ) -> bytes:
        keys = self._keys_for(conn, gen)
        dk = aead.unwrap_key(keys.master, wrapped, _dk_aad(deposit_id, owner, version))
        return aead.open_(dk, ciphertext, _content_aad(deposit_id, owner, version))

    # -- rotation ---------------------------------------------------------------------
    def rotate(self, conn: Connection) -> int:
        """Re-wrap every data key and system key under a new master key; returns the new generation.

        Must run inside Store.action(), whose lock keeps concurrent puts from wrapping
        under the old key while this runs.
        """
        self.refresh(conn)
        old = self._current()
        new_gen = old.master_gen + 1
        new_master = aead.new_key()
        conn.execute(
            st.master_keys.insert().values(
                generation=new_gen, wrapped=aead.wrap_key(old.unseal, new_master, _master_aad(new_gen)), created=time.time()
            )
        )
        rows = conn.execute(
            select(
                st.deposit_versions.c.deposit_id,
                st.deposit_versions.c.version,
                st.deposit_versions.c.wrapped_key,
                st.deposits.c.owner_id,
            ).join(st.deposits, st.deposits.c.id == st.deposit_versions.c.deposit_id)
        ).all()
        for r in rows:
            aad = _dk_aad(r.deposit_id, r.owner_id, r.version)
            dk = aead.unwrap_key(old.master, r.wrapped_key, aad)
            conn.execute(
                update(st.deposit_versions)
                .where(st.deposit_versions.c.deposit_id == r.deposit_id, st.deposit_versions.c.version == r.version)
                .values(master_gen=new_gen, wrapped_key=aead.wrap_key(new_master, dk, aad))
            )
        for s in conn.execute(select(st.system_keys)).all():
            key = aead.unwrap_key(old.master, s.wrapped, _syskey_aad(s.name))
            conn.execute(
                update(st.system_keys)
                .where(st.system_keys.c.name == s.name)
                .values(master_gen=new_gen, wrapped=aead.wrap_key(new_master, key, _syskey_aad(s.name)))
            )
        conn.execute(delete(st.master_keys).where(st.master_keys.c.generation != new_gen))
        st.set_meta(conn, "master_gen", str(new_gen))
        # This process adopts the new key through refresh() once the transaction has
        # committed, like every other process; a rolled-back rotation changes nothing.
        return new_gen
