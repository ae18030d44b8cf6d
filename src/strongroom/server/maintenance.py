"""Offline checks that need the passphrase rather than a running server."""

from __future__ import annotations

from strongroom.server import audit, barrier, storage
from strongroom.server.datadir import DataDir


def verify_audit(data: DataDir, passphrase: str) -> audit.VerifyResult:
    store = storage.Store(data.load_config().db_url)
    try:
        with store.read() as conn:
            bar = barrier.Barrier()
            bar.unseal(conn, barrier.derive_unseal_key(conn, passphrase), 0)
            return audit.verify(conn, bar.audit_key(), data.head_file)
    finally:
        store.dispose()
