"""The tamper-evident audit log: entries chained with HMAC-SHA256 under the audit key.

mac_n = HMAC(audit_key, "strongroom audit v1" || mac_{n-1} || canonical(entry_n)), mac_0 = 32 zero bytes.
Entries are written in the same transaction as the action they record.  The chain
head is also mirrored to a file in the data dir, so truncating the table (and
rewriting the head row) is caught as long as the data dir is intact.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

from strongroom.server import repository as repo
from strongroom.server.headfile import HeadFile
from strongroom.server.storage import Tx

GENESIS = bytes(32)
_DOMAIN = b"strongroom audit v1"


def canonical(seq: int, ts: float, actor: str, action: str, target: str, outcome: str, detail: str) -> bytes:
    return json.dumps([seq, ts, actor, action, target, outcome, detail], separators=(",", ":")).encode()


def entry_mac(key: bytes, prev: bytes, body: bytes) -> bytes:
    return hmac.new(key, _DOMAIN + prev + body, hashlib.sha256).digest()


class AuditWriter:
    """Appends to the chain inside one Store.action() transaction.

    The head row is written once, by ``flush()`` before the commit, not after every entry: a
    batch of actions shares one transaction, and one UPDATE per batch is enough.
    """

    def __init__(self, tx: Tx, head_seq: int, head_mac: bytes, key: bytes) -> None:
        self._tx = tx
        self.seq = head_seq
        self.mac = head_mac
        self._key = key
        self._flushed = head_seq

    def append(self, actor: str, action: str, target: str = "", outcome: str = "ok", **detail: Any) -> None:
        seq = self.seq + 1
        ts = time.time()
        detail_text = json.dumps(detail, separators=(",", ":"), sort_keys=True)
        mac = entry_mac(self._key, self.mac, canonical(seq, ts, actor, action, target, outcome, detail_text))
        repo.append_audit(self._tx, seq, ts, actor, action, target, outcome, detail_text, mac)
        self.seq, self.mac = seq, mac

    def flush(self) -> None:
        """Write the chain head row; call it inside the transaction, after the last append."""
        if self.seq != self._flushed:
            repo.set_audit_head(self._tx, self.seq, self.mac)
            self._flushed = self.seq


@dataclass
class VerifyResult:
    ok: bool
    entries: int
    first_bad: int | None = None
    reason: str = ""


def verify(tx: Tx, key: bytes, head_file: HeadFile | None) -> VerifyResult:
    prev = GENESIS
    expected = 1
    count = 0
    macs: dict[int, bytes] = {}
    rows = repo.all_audit(tx)
    for seq, ts, actor, action, target, outcome, detail, mac in rows:
        mac = bytes(mac)
        if seq != expected:
            return VerifyResult(False, count, expected, f"entry {expected} is missing (next present is {seq})")
        body = canonical(seq, ts, actor, action, target, outcome, detail)
        if not hmac.compare_digest(entry_mac(key, prev, body), mac):
            return VerifyResult(False, count, seq, f"entry {seq} was edited, moved or re-chained")
        prev = mac
        macs[seq] = mac
        expected += 1
        count += 1
    last = expected - 1
    head = repo.audit_head(tx)
    if head is None or head[0] != last or not hmac.compare_digest(bytes(head[1]), prev):
        return VerifyResult(
            False, count, last + 1, f"the database head says entry {head[0] if head else '?'}, the log ends at {last}"
        )
    if head_file is not None:
        mirrored = head_file.read()
        if mirrored is not None:
            fseq, fmac = mirrored.seq, mirrored.mac
            if fseq > last and mirrored.prev is not None and mirrored.prev[0] == last:
                # The batch after `last` was in flight at a crash: never committed, never answered.
                fseq, fmac = mirrored.prev
            if fseq > last:
                return VerifyResult(False, count, last + 1, f"log truncated: the data dir head names entry {fseq}")
            if fseq > 0 and not hmac.compare_digest(macs.get(fseq, b""), fmac):
                return VerifyResult(False, count, fseq, f"entry {fseq} differs from the data dir head")
    return VerifyResult(True, count)
