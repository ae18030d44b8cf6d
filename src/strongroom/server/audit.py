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

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from strongroom.server import storage as st
from strongroom.server.headfile import HeadFile

GENESIS = bytes(32)
_DOMAIN = b"strongroom audit v1"


def canonical(seq: int, ts: float, actor: str, action: str, target: str, outcome: str, detail: str) -> bytes:
    return json.dumps([seq, ts, actor, action, target, outcome, detail], separators=(",", ":")).encode()


def entry_mac(key: bytes, prev: bytes, body: bytes) -> bytes:
    return hmac.new(key, _DOMAIN + prev + body, hashlib.sha256).digest()


class AuditWriter:
    """Appends to the chain inside one Store.action() transaction."""

    def __init__(self, conn: Connection, head_seq: int, head_mac: bytes, key: bytes) -> None:
        self._conn = conn
        self.seq = head_seq
        self.mac = head_mac
        self._key = key

    def append(self, actor: str, action: str, target: str = "", outcome: str = "ok", **detail: Any) -> None:
        seq = self.seq + 1
        ts = time.time()
        detail_text = json.dumps(detail, separators=(",", ":"), sort_keys=True)
        mac = entry_mac(self._key, self.mac, canonical(seq, ts, actor, action, target, outcome, detail_text))
        self._conn.execute(
            st.audit.insert().values(
                seq=seq, ts=ts, actor=actor, action=action, target=target, outcome=outcome, detail=detail_text, mac=mac
            )
        )
        self._conn.execute(update(st.audit_head).where(st.audit_head.c.id == 1).values(seq=seq, mac=mac))
        self.seq, self.mac = seq, mac


@dataclass
class VerifyResult:
    ok: bool
    entries: int
    first_bad: int | None = None
    reason: str = ""


def verify(conn: Connection, key: bytes, head_file: HeadFile | None) -> VerifyResult:
    prev = GENESIS
    expected = 1
    count = 0
    macs: dict[int, bytes] = {}
    rows = conn.execute(select(st.audit).order_by(st.audit.c.seq))
    for r in rows:
        if r.seq != expected:
            return VerifyResult(False, count, expected, f"entry {expected} is missing (next present is {r.seq})")
        body = canonical(r.seq, r.ts, r.actor, r.action, r.target, r.outcome, r.detail)
        if not hmac.compare_digest(entry_mac(key, prev, body), r.mac):
            return VerifyResult(False, count, r.seq, f"entry {r.seq} was edited, moved or re-chained")
        prev = r.mac
        macs[r.seq] = r.mac
        expected += 1
        count += 1
    last = expected - 1
    head = conn.execute(select(st.audit_head.c.seq, st.audit_head.c.mac).where(st.audit_head.c.id == 1)).one()
    if head.seq != last or not hmac.compare_digest(head.mac, prev):
        return VerifyResult(False, count, last + 1, f"the database head says entry {head.seq}, the log ends at {last}")
    if head_file is not None:
        mirrored = head_file.read()
        if mirrored is not None:
            fseq, fmac = mirrored
            if fseq > last:
                return VerifyResult(False, count, last + 1, f"log truncated: the data dir head names entry {fseq}")
            if fseq > 0 and not hmac.compare_digest(macs.get(fseq, b""), fmac):
                return VerifyResult(False, count, fseq, f"entry {fseq} differs from the data dir head")
    return VerifyResult(True, count)
