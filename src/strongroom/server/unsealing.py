"""Shares given one at a time, by several admins, to any process of any server on the database,
until enough have come to unseal (or to rekey).

A share is never stored as given: it is sealed to the box key of every live server process
(nodes.py), one row per process, so the database alone opens none of them.  A process that holds
boxes for ``threshold`` distinct shares can combine them: the one that received the last share at
once, or any other at its next tick (one that started after the first shares were given holds
no box for them).  Progress counts only shares some live process can open: rows sealed to
processes that have gone are dead weight and are removed.
"""

from __future__ import annotations

import time

from strongroom.crypto import aead, sealedbox
from strongroom.server.nodes import LIVE_SECONDS, NodeAgent
from strongroom.server.storage import Tx

PURPOSES = ("unseal", "rekey")


class DuplicateShare(Exception):
    pass


def _aad(purpose: str, node_id: str, index: int) -> bytes:
    return f"strongroom pending share v1\0{purpose}\0{node_id}\0{index}".encode()


def progress(tx: Tx, purpose: str) -> int:
    """How many distinct shares given towards ``purpose`` a live process can open."""
    since = time.time() - LIVE_SECONDS
    value = tx.value(
        "SELECT COUNT(DISTINCT share_index) FROM pending_shares WHERE purpose = ? "
        "AND node_id IN (SELECT id FROM nodes WHERE heartbeat > ?)",
        purpose,
        since,
    )
    return int(value or 0)


class ShareCollector:
    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent

    def _forget_dead(self, tx: Tx, now: float) -> None:
        tx.run(
            "DELETE FROM pending_shares WHERE node_id NOT IN (SELECT id FROM nodes WHERE heartbeat > ?) AND node_id <> ?",
            now - LIVE_SECONDS,
            self.agent.node_id,
        )

    def given(self, tx: Tx, purpose: str) -> set[int]:
        """The indexes of the shares given so far that a live process can open."""
        self._forget_dead(tx, time.time())
        rows = tx.all("SELECT DISTINCT share_index FROM pending_shares WHERE purpose = ?", purpose)
        return {int(r[0]) for r in rows}

    def add(self, tx: Tx, purpose: str, index: int, text: str, given_by: str) -> int:
        """Keep one share (DuplicateShare if its index was given already); returns the number of
        distinct shares now held."""
        have = self.given(tx, purpose)
        if index in have:
            raise DuplicateShare(f"share {index + 1} was given already")
        now = time.time()
        for node_id, public in self.agent.live_verified(tx, now):
            box = sealedbox.seal_to(public, text.encode(), _aad(purpose, node_id, index))
            tx.run(
                "INSERT INTO pending_shares (purpose, share_index, node_id, box, given_by, created) VALUES (?, ?, ?, ?, ?, ?)",
                purpose,
                index,
                node_id,
                box,
                given_by,
                now,
            )
        return len(have) + 1

    def take(self, tx: Tx, purpose: str, threshold: int) -> list[str] | None:
        """The shares this process can open, if they are at least ``threshold``; else None."""
        rows = tx.all(
            "SELECT share_index, box FROM pending_shares WHERE purpose = ? AND node_id = ?", purpose, self.agent.node_id
        )
        if len(rows) < threshold:
            return None
        out = []
        for index, box in rows:
            try:
                out.append(self.agent.box.open(bytes(box), _aad(purpose, self.agent.node_id, int(index))).decode())
            except (aead.DecryptionError, UnicodeDecodeError):
                continue  # not sealed to this process's key (a forged row): never combined
        return out if len(out) >= threshold else None

    def claim(self, tx: Tx, purpose: str, threshold: int) -> tuple[list[str], list[str]] | None:
        """``take``, and in the same transaction forget every share given (used or refused:
        never twice), so that of two processes that could combine, one does: (shares, givers)."""
        texts = self.take(tx, purpose, threshold)
        if texts is None:
            return None
        givers = self.givers(tx, purpose)
        self.reset(tx, purpose)
        return texts, givers

    def givers(self, tx: Tx, purpose: str) -> list[str]:
        rows = tx.all("SELECT DISTINCT given_by FROM pending_shares WHERE purpose = ? ORDER BY given_by", purpose)
        return [str(r[0]) for r in rows]

    def reset(self, tx: Tx, purpose: str) -> None:
        tx.run("DELETE FROM pending_shares WHERE purpose = ?", purpose)
