"""Offline checks that need the unseal material rather than a running server."""

from __future__ import annotations

from collections.abc import Callable

from strongroom.server import audit, barrier, storage
from strongroom.server import repository as repo
from strongroom.server.datadir import DataDir
from strongroom.server.hsm import ServerHsm
from strongroom.server.sealconfig import SealConfig
from strongroom.server.transitseal import TransitSeal


def verify_audit(
    data: DataDir, unlock: barrier.Unlock, checkpoints: tuple[tuple[int, bytes], ...] = ()
) -> tuple[audit.VerifyResult, tuple[int, bytes]]:
    """The chain verified (against ``checkpoints`` too), and its head as a checkpoint."""
    store = storage.Store(data.load_config().db_url)
    try:
        with store.snapshot() as tx:
            bar = barrier.Barrier()
            bar.open_with(tx, unlock, 0)
            return audit.verify(tx, bar.audit_key(), data.head_file, checkpoints), audit.checkpoint(tx)
    finally:
        store.dispose()


def seal_of(data: DataDir) -> SealConfig:
    """How the data dir's server is unsealed (its database's seal record)."""
    store = storage.Store(data.load_config().db_url)
    try:
        store.check_schema_version()  # every offline tool asks this first
        with store.snapshot() as tx:
            return barrier.seal_config(tx)
    finally:
        store.dispose()


def migrate_seal(
    data: DataDir,
    current: barrier.Unlock,
    target: barrier.Unlock,
    n: int,
    m: int,
    holder: ServerHsm | TransitSeal | None,
    hand_out: Callable[[list[str]], None],
) -> SealConfig:
    """Keep the master key under a new seal: a passphrase, shares, or the HSM (``target``).

    One database transaction; ``hand_out`` gets the new shares before it commits, so that a
    crash never leaves a seal in force whose shares nobody saw.  The HSM's settings are added to
    config.json before the commit (unused until the seal record names the HSM) and removed after
    a move away from it; so are a transit seal's.  Audited (the chain's head file follows)."""
    config = data.load_config()
    if isinstance(holder, ServerHsm):
        config.hsm = holder.to_json()
        data.write_config(config)
    elif holder is not None:
        config.transit_seal = holder.to_json()
        data.write_config(config)
    store = storage.Store(config.db_url)
    try:
        with store.action() as (tx, seq, mac):
            bar = barrier.Barrier()
            before = barrier.seal_config(tx)
            bar.open_with(tx, current, int(repo.get_meta(tx, "seal_epoch") or "1"))
            label = holder.key_label if isinstance(holder, ServerHsm) else holder.key if holder else ""
            made = bar.reseal(tx, target, n, m, label)
            after = barrier.seal_config(tx)
            aw = audit.AuditWriter(tx, seq, mac, bar.audit_key())
            aw.append("operator", "seal.migrate", "", "ok", before=before.kind, after=after.kind, shares=n, threshold=m)
            aw.flush()
            hand_out(made)
        data.head_file.advance(aw.seq, aw.mac)
    finally:
        store.dispose()
    if (after.kind != "pkcs11" and config.hsm is not None) or (after.kind != "transit" and config.transit_seal is not None):
        config.hsm = config.hsm if after.kind == "pkcs11" else None
        config.transit_seal = config.transit_seal if after.kind == "transit" else None
        data.write_config(config)
    return after
