"""Seal state shared by every server process on one database.

Each process registers an in-memory X25519 key (authenticated with the data dir's
node key, so a database writer cannot enrol a node of its own).  An unsealed process
seals the unseal key to each registered node that lacks it; a sealed process picks
its grant up and unseals.  Sealing bumps the epoch and every process drops its keys.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time

from sqlalchemy import delete, select, update

from strongroom.crypto import aead, sealedbox
from strongroom.crypto.identity import b64u
from strongroom.server import barrier as barrier_mod
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

    def _tag(self, node_id: str, public: bytes) -> bytes:
        return hmac.new(self._auth, b"strongroom node v1\0" + node_id.encode() + b"\0" + public, hashlib.sha256).digest()

    def join(self) -> None:
        with self.store.read() as conn:
            conn.execute(
                st.nodes.insert().values(
                    id=self.node_id,
                    public_key=self.box.public,
                    tag=self._tag(self.node_id, self.box.public),
                    heartbeat=time.time(),
                )
            )

    def leave(self) -> None:
        try:
            with self.store.read() as conn:
                conn.execute(delete(st.grants).where(st.grants.c.node_id == self.node_id))
                conn.execute(delete(st.nodes).where(st.nodes.c.id == self.node_id))
        except Exception:  # noqa: BLE001 - leaving is best effort; stale rows expire anyway
            log.debug("could not remove node row on exit", exc_info=True)

    def tick(self) -> None:
        """One round: heartbeat, follow the seal epoch and master generation, hand out grants."""
        now = time.time()
        with self.store.read() as conn:
            conn.execute(update(st.nodes).where(st.nodes.c.id == self.node_id).values(heartbeat=now))
            epoch = int(st.get_meta(conn, "seal_epoch") or "1")
            if not self.barrier.sealed and self.barrier.epoch != epoch:
                log.warning("sealed by another server process (epoch %d)", epoch)
                self.barrier.seal()
            if self.barrier.sealed:
                box = conn.execute(
                    select(st.grants.c.box).where(st.grants.c.node_id == self.node_id, st.grants.c.epoch == epoch)
                ).scalar_one_or_none()
                if box is not None:
                    try:
                        self.barrier.unseal(conn, self.box.open(box, _grant_aad(self.node_id, epoch)), epoch)
                        log.info("unsealed by a grant from another server process")
                    except (aead.DecryptionError, barrier_mod.WrongPassphrase, ValueError):
                        log.error("a grant for this process did not open; ignoring it")
                return
            self.barrier.refresh(conn)
            unseal_key = self.barrier.unseal_key()
            have = set(conn.execute(select(st.grants.c.node_id).where(st.grants.c.epoch == epoch)).scalars())
            for n in conn.execute(select(st.nodes).where(st.nodes.c.heartbeat > now - LIVE_SECONDS)).all():
                if n.id in have or n.id == self.node_id:
                    continue
                if not hmac.compare_digest(n.tag, self._tag(n.id, n.public_key)):
                    log.error("node row %s is not signed with this data dir's node key; not unsealing it", n.id)
                    continue
                conn.execute(
                    st.grants.insert().values(
                        node_id=n.id, epoch=epoch, box=sealedbox.seal_to(n.public_key, unseal_key, _grant_aad(n.id, epoch))
                    )
                )
            if now - self._last_cleanup > 10:
                self._last_cleanup = now
                stale = select(st.nodes.c.id).where(st.nodes.c.heartbeat < now - FORGET_SECONDS)
                conn.execute(delete(st.grants).where(st.grants.c.node_id.in_(stale)))
                conn.execute(delete(st.nodes).where(st.nodes.c.heartbeat < now - FORGET_SECONDS))
                conn.execute(delete(st.grants).where(st.grants.c.epoch != epoch))
                conn.execute(delete(st.nonces).where(st.nonces.c.expires < now))
