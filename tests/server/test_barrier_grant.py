"""The unseal key passes between server processes only sealed to a process's box key, and only
through the barrier (nodes.py never holds it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strongroom.crypto import aead, sealedbox
from strongroom.server import barrier, storage
from strongroom.server.datadir import DataDir
from strongroom.server.setup import init_server

PASSPHRASE = "grant test passphrase"


def test_a_grant_unseals_only_the_box_and_purpose_it_was_made_for(tmp_path: Path) -> None:
    data = DataDir(tmp_path / "data")
    init_server(data, PASSPHRASE)
    store = storage.Store(data.load_config().db_url)
    try:
        giver, taker = barrier.Barrier(), barrier.Barrier()
        with store.exclusive() as tx:
            giver.open_with(tx, barrier.Unlock(PASSPHRASE), 1)
        with pytest.raises(barrier.SealedError):
            taker.grant(sealedbox.BoxKey().public, b"aad")  # a sealed barrier has nothing to give
        box = sealedbox.BoxKey()
        grant = giver.grant(box.public, b"grant for n_1 at 1")
        with store.exclusive() as tx:
            with pytest.raises(aead.DecryptionError):
                taker.unseal_with_grant(tx, sealedbox.BoxKey(), grant, b"grant for n_1 at 1", 1)  # another box
            with pytest.raises(aead.DecryptionError):
                taker.unseal_with_grant(tx, box, grant, b"grant for n_2 at 1", 1)  # another node or epoch
            assert taker.sealed
            taker.unseal_with_grant(tx, box, grant, b"grant for n_1 at 1", 1)
        assert not taker.sealed and taker.epoch == 1
        assert not hasattr(taker, "unseal_key")  # no way to ask for the key in the clear
    finally:
        store.dispose()
