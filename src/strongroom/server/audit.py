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
from strongroom.server.errors import BadRequest
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

    Entries and the head row are written by ``flush()`` before the commit, not one by one: a
    batch of actions shares one transaction, and one INSERT of many rows and one UPDATE per
    batch are enough.
    """

    def __init__(self, tx: Tx, head_seq: int, head_mac: bytes, key: bytes) -> None:
        self._tx = tx
        self.seq = head_seq
        self.mac = head_mac
        self._key = key
        self._flushed = head_seq
        self._rows: list[tuple[int, float, str, str, str, str, str, bytes]] = []

    def append(self, actor: str, action: str, target: str = "", outcome: str = "ok", **detail: Any) -> None:
        if "\x00" in actor or "\x00" in target:  # refused here, in the action, not at the batch's flush
            raise BadRequest("text may not contain NUL characters")
        seq = self.seq + 1
        ts = time.time()
        detail_text = json.dumps(detail, separators=(",", ":"), sort_keys=True)
        mac = entry_mac(self._key, self.mac, canonical(seq, ts, actor, action, target, outcome, detail_text))
        self._rows.append((seq, ts, actor, action, target, outcome, detail_text, mac))
        self.seq, self.mac = seq, mac

    def mark(self) -> tuple[int, bytes, int]:
        """Where the chain stands, for ``rewind``."""
        return self.seq, self.mac, len(self._rows)

    def rewind(self, mark: tuple[int, bytes, int]) -> None:
        """Forget the entries appended since ``mark`` (their action was undone)."""
        self.seq, self.mac, n = mark
        if n < len(self._rows):
            del self._rows[n:]
        elif n > len(self._rows):
            raise RuntimeError("rewinding past entries already written")

    def write_rows(self) -> None:
        """Write the pending entries (before a savepoint, or before reading the log)."""
        if self._rows:
            repo.append_audit_rows(self._tx, self._rows)
            self._rows = []

    def flush(self) -> None:
        """Write the pending entries and the chain head row; call it inside the transaction,
        after the last append."""
        self.write_rows()
        if self.seq != self._flushed:
            repo.set_audit_head(self._tx, self.seq, self.mac)
            self._flushed = self.seq


@dataclass
class VerifyResult:
    ok: bool
    entries: int
    first_bad: int | None = None
    reason: str = ""


def verify(tx: Tx, key: bytes, head_file: HeadFile | None, checkpoints: tuple[tuple[int, bytes], ...] = ()) -> VerifyResult:
    """The whole chain checked against its MACs, the database head, the data dir's head file and
    any ``checkpoints`` (seq, mac) taken earlier with `server audit checkpoint` and kept
    elsewhere: a checkpoint names an entry the chain must still hold, unchanged."""
    result = _verify(tx, key, head_file)
    if not result.ok:
        return result
    for seq, mac in checkpoints:
        if seq > result.entries:
            return VerifyResult(False, result.entries, result.entries + 1, f"log truncated: a checkpoint names entry {seq}")
        row = tx.one("SELECT mac FROM audit WHERE seq = ?", seq) if seq > 0 else None
        if seq > 0 and (row is None or not hmac.compare_digest(bytes(row[0]), mac)):
            return VerifyResult(False, result.entries, seq, f"entry {seq} differs from the checkpoint")
    return result


def tail(tx: Tx, aw: AuditWriter, after: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` entries after ``after``, this batch's own so far included (as a reader
    after it would see them)."""
    aw.write_rows()
    return [
        {"seq": r[0], "ts": r[1], "actor": r[2], "action": r[3], "target": r[4], "outcome": r[5], "detail": json.loads(r[6])}
        for r in repo.audit_entries(tx, after, limit)
    ]


def checkpoint(tx: Tx) -> tuple[int, bytes]:
    """The chain's head (seq, mac), to keep outside the server and give to `audit verify`."""
    head = repo.audit_head(tx)
    return (0, GENESIS) if head is None else (int(head[0]), bytes(head[1]))


def parse_checkpoint(text: str) -> tuple[int, bytes]:
    """``SEQ:MAC`` (decimal, hex) as `server audit checkpoint` prints it; ValueError otherwise."""
    seq, sep, mac = text.strip().partition(":")
    if not sep or not (seq.isascii() and seq.isdigit()) or len(mac) != 64:
        raise ValueError(f"not a checkpoint (SEQ:MAC): {text.strip()[:80]!r}")
    return int(seq), bytes.fromhex(mac)


def _verify(tx: Tx, key: bytes, head_file: HeadFile | None) -> VerifyResult:
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
        try:
            mirrored = head_file.read()
        except (ValueError, OSError):
            return VerifyResult(False, count, None, "the data dir's audit head file is damaged or unreadable")
        if mirrored is None:
            # `server init` and a restore write it: gone or emptied, it can no longer tell how
            # long the chain was, which is what wiping the chain's tail with it would hide
            return VerifyResult(False, count, None, "the data dir's audit head file is missing or empty")
        fseq, fmac = mirrored.seq, mirrored.mac
        if fseq > last and mirrored.prev is not None and mirrored.prev[0] == last:
            # The batch after `last` was in flight at a crash: never committed, never answered.
            fseq, fmac = mirrored.prev
        if fseq > last:
            return VerifyResult(False, count, last + 1, f"log truncated: the data dir head names entry {fseq}")
        if fseq > 0 and not hmac.compare_digest(macs.get(fseq, b""), fmac):
            return VerifyResult(False, count, fseq, f"entry {fseq} differs from the data dir head")
    return VerifyResult(True, count)
