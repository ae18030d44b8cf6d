"""Offline checks that need the passphrase rather than a running server."""

from __future__ import annotations

from strongroom.server import audit, barrier, storage
from strongroom.server.datadir import DataDir


def verify_audit(
    data: DataDir, passphrase: str, checkpoints: tuple[tuple[int, bytes], ...] = ()
) -> tuple[audit.VerifyResult, tuple[int, bytes]]:
    """The chain verified (against ``checkpoints`` too), and its head as a checkpoint."""
    store = storage.Store(data.load_config().db_url)
    try:
        with store.snapshot() as tx:
            bar = barrier.Barrier()
            bar.unseal_with_passphrase(tx, passphrase, 0)
            return audit.verify(tx, bar.audit_key(), data.head_file, checkpoints), audit.checkpoint(tx)
    finally:
        store.dispose()
