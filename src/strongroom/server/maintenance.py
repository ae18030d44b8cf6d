"""Offline checks that need the passphrase rather than a running server."""

from __future__ import annotations

from strongroom.server import audit, barrier, storage
from strongroom.server.datadir import DataDir


def verify_audit(data: DataDir, passphrase: str) -> audit.VerifyResult:
    store = storage.Store(data.load_config().db_url)
    try:
        with store.snapshot() as tx:
            bar = barrier.Barrier()
            bar.unseal(tx, barrier.derive_unseal_key(tx, passphrase), 0)
            return audit.verify(tx, bar.audit_key(), data.head_file)
    finally:
        store.dispose()
