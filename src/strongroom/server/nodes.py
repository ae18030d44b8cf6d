"""Seal state shared by every server process on one database.

Each process registers an in-memory X25519 key (authenticated with the data dir's
node key, so a database writer cannot enrol a node of its own).  An unsealed process
has its barrier seal the unseal key to each registered node that lacks it; a sealed process
hands its grant to its barrier to unseal.  The unseal key itself never passes through here.
Sealing bumps the epoch and every process drops its keys.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
from collections.abc import Callable

from strongroom.crypto import aead, sealedbox
from strongroom.crypto.identity import b64u
from strongroom.server import barrier as barrier_mod
from strongroom.server import repository as repo
from strongroom.server import schema
from strongroom.server import storage as st

log = logging.getLogger("strongroom.server.nodes")

LIVE_SECONDS = 30.0
FORGET_SECONDS = 120.0


def _grant_aad(node_id: str, epoch: int) -> bytes:
    return f"strongroom grant v1\0{node_id}\0{epoch}".encode()


class NodeAgent:
    def __init__(self, store: st.Store, barrier: barrier_mod.Barrier, node_key: bytes) -> None:
        self.store = store
        self.barrier = barrier
        self._auth = node_key
        self.box = sealedbox.BoxKey()
        self.node_id = "n_" + b64u(os.urandom(12))
        self._last_cleanup = 0.0
        self.when_sealed: Callable[[], None] | None = None

    def _tag(self, node_id: str, public: bytes) -> bytes:
        return hmac.new(self._auth, b"strongroom node v1\0" + node_id.encode() + b"\0" + public, hashlib.sha256).digest()

    def join(self) -> None:
        with self.store.exclusive() as tx:
            repo.insert_node(tx, self.node_id, self.box.public, self._tag(self.node_id, self.box.public), time.time())

    def leave(self) -> None:
        try:
            with self.store.exclusive() as tx:
                repo.delete_node(tx, self.node_id)
        except Exception:  # noqa: BLE001 - leaving is best effort; stale rows expire anyway
            log.debug("could not remove node row on exit", exc_info=True)

    def live_verified(self, tx: st.Tx, now: float) -> list[tuple[str, bytes]]:
        """(id, box public key) of the live processes whose rows carry this data dir's node-key
        tag, this one always included."""
        out = [(self.node_id, self.box.public)]
        for node_id, public, tag in repo.live_nodes(tx, now - LIVE_SECONDS):
            if node_id == self.node_id:
                continue
            if not hmac.compare_digest(tag, self._tag(node_id, public)):
                log.error("node row %s is not signed with this data dir's node key; not trusting it", node_id)
                continue
            out.append((node_id, public))
        return out

    def tick(self) -> None:
        """One round: heartbeat, follow the seal epoch and master generation, hand out grants;
        still sealed, try ``when_sealed`` (pending shares, the HSM: sealing.py)."""
        self._grant_round(time.time())
        if self.barrier.sealed and self.when_sealed is not None:
            self.when_sealed()

    def _grant_round(self, now: float) -> None:
        with self.store.exclusive() as tx:
            repo.heartbeat(tx, self.node_id, now)
            epoch = int(repo.get_meta(tx, "seal_epoch") or "1")
            if not self.barrier.sealed and self.barrier.epoch != epoch:
                log.warning("sealed by another server process (epoch %d)", epoch)
                self.barrier.seal()
            if self.barrier.sealed:
                box = repo.grant_for(tx, self.node_id, epoch)
                if box is not None:
                    try:
                        self.barrier.unseal_with_grant(tx, self.box, box, _grant_aad(self.node_id, epoch), epoch)
                        log.info("unsealed by a grant from another server process")
                    except (aead.DecryptionError, barrier_mod.WrongPassphrase, ValueError):
                        log.error("a grant for this process did not open; asking for another")
                        repo.delete_grant(tx, self.node_id, epoch)  # made with a key a rekey replaced
                return
            self.barrier.refresh(tx)
            self.barrier.follow_unseal_key(tx)  # a rekey elsewhere: grant the key in force
            have = repo.granted_nodes(tx, epoch)
            for node_id, public in self.live_verified(tx, now):
                if node_id in have or node_id == self.node_id:
                    continue
                repo.insert_grant(tx, node_id, epoch, self.barrier.grant(public, _grant_aad(node_id, epoch)))
            if now - self._last_cleanup > 10:
                self._last_cleanup = now
                # a request older than the nonce memory is refused for its timestamp alone
                repo.forget_stale(tx, epoch, now - FORGET_SECONDS, int(now) - schema.NONCE_MEMORY_SECONDS)
