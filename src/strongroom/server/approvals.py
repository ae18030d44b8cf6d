"""Release approval: a deposit whose policy names approvers (clients, groups) and a count M is
released only after M of them approve (docs/API.md, "Approvals").

A retrieval without a usable approval is refused 403 ``approval_required`` with the id of a
pending request (one per requester and deposit; it expires after a day).  Approvers approve or
deny it; one denial denies it.  At M approvals it is approved: for one retrieval within an hour
(the policy's window 0), or for the requester's retrievals during the window.  A one-retrieval
approval is used by a conditional UPDATE inside the retrieval's transaction, so two racing gets
on two servers release once.  Changing the policy cancels the deposit's open requests.  Every
request, vote and use is audited.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from strongroom.crypto.identity import b64u
from strongroom.server import repository as repo
from strongroom.server.ctx import Ctx
from strongroom.server.errors import ApprovalRequired, Conflict, Denied, Gone, NotFound, Refused
from strongroom.server.repository import ClientRow, DepositRow
from strongroom.server.storage import Tx

REQUEST_TTL = 86400.0  # a pending request expires, undecided, after a day
APPROVED_TTL = 3600.0  # a one-retrieval approval must be used within an hour
MAX_WINDOW = 30 * 86400
MAX_APPROVERS = 100
MAX_LISTED = 500

_APPROVER = (
    "SELECT 1 FROM deposit_approvers a WHERE a.deposit_id = ? AND ("
    "(a.kind = 'client' AND a.principal = ?) OR "
    "(a.kind = 'group' AND a.principal IN ("
    "SELECT g.name FROM groups g JOIN group_members m ON m.group_id = g.id WHERE m.client_id = ?)))"
)


def set_approvers(tx: Tx, deposit_id: int, approvers: list[tuple[str, str]], required: int, window: int) -> None:
    """Replace a deposit's approvers and counts; its open requests are cancelled."""
    tx.run("DELETE FROM deposit_approvers WHERE deposit_id = ?", deposit_id)
    if approvers:
        tx.many(
            "INSERT INTO deposit_approvers (deposit_id, kind, principal) VALUES (?, ?, ?)",
            [(deposit_id, k, p) for k, p in approvers],
        )
    tx.run("UPDATE deposits SET approvals_required = ?, approval_window = ? WHERE id = ?", required, window, deposit_id)
    cancel = "UPDATE approval_requests SET state = 'cancelled' WHERE deposit_id = ? AND state IN ('pending', 'approved')"
    tx.run(cancel, deposit_id)


def approvers(tx: Tx, deposit_id: int) -> list[str]:
    rows = tx.all("SELECT kind, principal FROM deposit_approvers WHERE deposit_id = ? ORDER BY kind, principal", deposit_id)
    return [f"{k}:{p}" for k, p in rows]


def _is_approver(tx: Tx, deposit_id: int, client_id: str) -> bool:
    return tx.one(_APPROVER + " LIMIT 1", deposit_id, client_id, client_id) is not None


class Approvals:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock

    def gate(self, ctx: Ctx, dep: DepositRow, action: str, target: str) -> str:
        """Let a retrieval through on an approval (its id), or refuse it with a pending request."""
        tx, me, now = ctx.tx, ctx.client, self.clock()
        window = tx.value(
            "SELECT id FROM approval_requests WHERE deposit_id = ? AND requester_id = ? AND state = 'approved' "
            "AND window_until IS NOT NULL AND window_until > ? LIMIT 1",
            dep.id,
            me.id,
            now,
        )
        if window is not None:
            return str(window)
        singles = tx.all(
            "SELECT id FROM approval_requests WHERE deposit_id = ? AND requester_id = ? AND state = 'approved' "
            "AND window_until IS NULL AND expires > ? ORDER BY created",
            dep.id,
            me.id,
            now,
        )
        for (request_id,) in singles:  # used once: the UPDATE that finds it still approved wins
            use = "UPDATE approval_requests SET state = 'used', used_at = ? WHERE id = ? AND state = 'approved'"
            if tx.run(use, now, request_id):
                return str(request_id)
        pending = tx.value(
            "SELECT id FROM approval_requests WHERE deposit_id = ? AND requester_id = ? AND state = 'pending' AND expires > ?",
            dep.id,
            me.id,
            now,
        )
        if pending is None:
            pending = "apr_" + b64u(os.urandom(15))
            tx.run(
                "INSERT INTO approval_requests (id, deposit_id, requester_id, state, created, expires) "
                "VALUES (?, ?, ?, 'pending', ?, ?)",
                pending,
                dep.id,
                me.id,
                now,
                now + REQUEST_TTL,
            )
        given = int(tx.value("SELECT COUNT(*) FROM approval_votes WHERE request_id = ? AND approve = 1", pending) or 0)
        ctx.audit.append(me.id, action, target, "denied", reason="approval required", request=str(pending), approvals=given)
        raise Refused(
            ApprovalRequired(
                f"releasing this deposit needs {dep.approvals_required} approvals ({given} so far): request {pending} is pending",
                str(pending),
            )
        )

    def _request(self, tx: Tx, request_id: str) -> tuple[Any, ...] | None:
        return tx.one(
            "SELECT r.id, r.deposit_id, r.requester_id, r.state, r.created, r.expires, r.window_until, "
            "d.owner_id, d.name, d.approvals_required, d.approval_window "
            "FROM approval_requests r JOIN deposits d ON d.id = r.deposit_id WHERE r.id = ?",
            request_id,
        )

    def _describe(self, tx: Tx, row: tuple[Any, ...], now: float) -> dict[str, Any]:
        rid, _dep, requester, state, created, expires, window_until, owner, name, required, _window = row
        if state in ("pending", "approved") and (window_until if window_until is not None else expires) <= now:
            state = "expired"
        votes = tx.all("SELECT approver_id, approve, at FROM approval_votes WHERE request_id = ? ORDER BY at", rid)
        return {
            "id": rid,
            "deposit": f"{owner}/{name}",
            "requester": requester,
            "state": state,
            "created": created,
            "expires": window_until if window_until is not None else expires,
            "required": required,
            "approvals": [a for a, ok, _t in votes if ok],
            "denials": [a for a, ok, _t in votes if not ok],
        }

    def vote(self, ctx: Ctx, request_id: str, approve: bool) -> dict[str, Any]:
        tx, me, now = ctx.tx, ctx.client, self.clock()
        action = "approval.approve" if approve else "approval.deny"
        row = self._request(tx, request_id) if request_id.startswith("apr_") and len(request_id) <= 32 else None
        if row is None:
            ctx.audit.append(me.id, action, request_id[:40], "denied", reason="no such request")
            raise Refused(NotFound("no such approval request"))
        _rid, dep_id, requester, state, _created, expires, _w, owner, name, required, window = row
        target = f"{owner}/{name}"
        if not _is_approver(tx, dep_id, me.id):
            ctx.audit.append(me.id, action, target, "denied", reason="not an approver", request=request_id)
            raise Refused(Denied("you are not an approver of this deposit"))
        if me.id == requester:
            ctx.audit.append(me.id, action, target, "denied", reason="own request", request=request_id)
            raise Refused(Denied("a requester cannot approve or deny their own request"))
        if state != "pending" or expires <= now:
            why = "expired" if state == "pending" else state
            ctx.audit.append(me.id, action, target, "denied", reason=f"request {why}", request=request_id)
            raise Refused(Gone(f"this request is {why}"))
        if tx.value("SELECT 1 FROM approval_votes WHERE request_id = ? AND approver_id = ?", request_id, me.id) is not None:
            ctx.audit.append(me.id, action, target, "denied", reason="voted already", request=request_id)
            raise Refused(Conflict("you have approved or denied this request already"))
        tx.run(
            "INSERT INTO approval_votes (request_id, approver_id, approve, at) VALUES (?, ?, ?, ?)",
            request_id,
            me.id,
            1 if approve else 0,
            now,
        )
        given = int(tx.value("SELECT COUNT(*) FROM approval_votes WHERE request_id = ? AND approve = 1", request_id) or 0)
        if not approve:
            tx.run("UPDATE approval_requests SET state = 'denied' WHERE id = ?", request_id)
        elif given >= required:
            if window:
                grant = "UPDATE approval_requests SET state = 'approved', window_until = ? WHERE id = ?"
                tx.run(grant, now + window, request_id)
            else:
                grant = "UPDATE approval_requests SET state = 'approved', expires = ? WHERE id = ?"
                tx.run(grant, now + APPROVED_TTL, request_id)
        ctx.audit.append(me.id, action, target, "ok", request=request_id, requester=requester, approvals=given, required=required)
        fresh = self._request(tx, request_id)
        assert fresh is not None
        return self._describe(tx, fresh, now)

    def listing(self, ctx: Ctx) -> list[dict[str, Any]]:
        """Open requests the caller may decide, and the caller's own requests."""
        tx, me, now = ctx.tx, ctx.client, self.clock()
        ids = tx.all(
            "SELECT r.id FROM approval_requests r WHERE (r.requester_id = ? OR ("
            "r.state = 'pending' AND r.expires > ? AND EXISTS ("
            + _APPROVER.replace("a.deposit_id = ?", "a.deposit_id = r.deposit_id")
            + "))) ORDER BY r.created DESC LIMIT ?",
            me.id,
            now,
            me.id,
            me.id,
            MAX_LISTED,
        )
        out = []
        for (rid,) in ids:
            row = self._request(tx, rid)
            if row is not None:
                out.append(self._describe(tx, row, now))
        return out


def check_principals(tx: Tx, owner: ClientRow, named: tuple[str, ...], what: str) -> list[tuple[str, str]]:
    """``client:ID`` and ``group:NAME`` entries (a policy's readers or approvers) as sorted
    (kind, principal) pairs, each checked to be in the owner's organization; ValueError names
    the first that is not."""
    from strongroom.server.identities import CLIENT_ID_RE, SHORT_NAME_RE

    out: list[tuple[str, str]] = []
    for entry in named:
        kind, _, ident = entry.partition(":")
        if kind == "client" and CLIENT_ID_RE.match(ident):
            if not repo.client_in_org(tx, ident, owner.org_id):
                raise ValueError(f"{what} {entry}: no such client in your organization")
        elif kind == "group" and SHORT_NAME_RE.match(ident):
            if repo.group_id(tx, owner.org_id, ident) is None:
                raise ValueError(f"{what} {entry}: no such group in your organization")
        else:
            raise ValueError(f"{what} {entry!r}: use client:ID or group:NAME")
        out.append((kind, ident))
    return sorted(set(out))


def check_approvers(tx: Tx, owner: ClientRow, named: tuple[str, ...], required: int, window: int) -> list[tuple[str, str]]:
    """The policy's approvers as (kind, principal), checked as readers are: ValueError names
    what is wrong."""
    if len(named) > MAX_APPROVERS:
        raise ValueError(f"at most {MAX_APPROVERS} approvers")
    if not 0 <= window <= MAX_WINDOW:
        raise ValueError(f"approval_window must be 0 to {MAX_WINDOW} seconds")
    out = check_principals(tx, owner, named, "approver")
    if required and not out:
        raise ValueError("approvals_required needs approvers")
    if not required and (out or window):
        raise ValueError("approvers and approval_window need approvals_required of 1 or more")
    if out and all(k == "client" for k, _ in out) and required > len(out):
        raise ValueError(f"approvals_required is {required} but only {len(out)} approvers are named")
    return out
