"""Deposits: a client's named, versioned secrets and who may read them (readers, not-before,
expiry, retrieval count), every outcome audited.  Content goes in and comes out through the
barrier alone."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from strongroom.crypto import aead
from strongroom.server import approvals, vault_rows
from strongroom.server import barrier as barrier_mod
from strongroom.server import repository as repo
from strongroom.server.ctx import Ctx
from strongroom.server.datadir import ServerConfig
from strongroom.server.errors import BadRequest, Denied, Gone, IntegrityFailure, NotFound, Refused, TooLarge
from strongroom.server.identities import CLIENT_ID_RE, check_name
from strongroom.server.kmip import rows as kmip_rows
from strongroom.server.messages import Policy
from strongroom.server.repository import ClientRow, DepositRow
from strongroom.server.storage import Tx

log = logging.getLogger("strongroom.server")

# Bounds the API checks before anything else, on every path a request can take.
MAX_VERSION = 2**31 - 1
MAX_OWNER_CHARS = 32


def _utc(t: float) -> str:
    """A Unix time as ISO 8601 UTC; a time stored before times were bounded (the API takes 0 to
    year 9999) is shown as it is instead of failing the request."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    except (OverflowError, ValueError, OSError):
        return repr(t)


class Deposits:
    def __init__(self, barrier: barrier_mod.Barrier, config: ServerConfig, clock: Callable[[], float] = time.time) -> None:
        self.barrier = barrier
        self.config = config
        self.clock = clock
        self.approvals = approvals.Approvals(clock)

    def _policy_rows(self, tx: Tx, owner: ClientRow, policy: Policy) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(readers, approvers) of a policy, checked."""
        if policy.max_retrievals is not None and policy.max_retrievals < 1:
            raise BadRequest("max_retrievals must be at least 1")
        try:
            named = approvals.check_approvers(tx, owner, policy.approvers, policy.approvals_required, policy.approval_window)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        try:
            readers = approvals.check_principals(tx, owner, policy.readers, "reader")
        except ValueError as e:
            raise BadRequest(str(e)) from None
        return readers, named

    def _set_policy(
        self, tx: Tx, deposit_id: int, rows: tuple[list[tuple[str, str]], list[tuple[str, str]]], policy: Policy
    ) -> None:
        readers, named = rows
        repo.set_policy(tx, deposit_id, readers, policy.expires_at, policy.not_before, policy.max_retrievals)
        approvals.set_approvers(tx, deposit_id, named, policy.approvals_required, policy.approval_window)

    def put(self, ctx: Ctx, name: str, data: bytes, policy: Policy | None) -> dict[str, Any]:
        return self.put_named(ctx, check_name(name), data, policy, "put")

    def put_named(self, ctx: Ctx, name: str, data: bytes, policy: Policy | None, action: str) -> dict[str, Any]:
        """A new version of the caller's deposit ``name`` (already checked by the caller's API)."""
        if len(data) > self.config.deposit_limit:
            raise TooLarge(f"deposit is larger than the server's limit of {self.config.deposit_limit} bytes")
        tx, me = ctx.tx, ctx.client
        rows = self._policy_rows(tx, me, policy) if policy is not None else ([], [])
        now = self.clock()
        dep = repo.deposit(tx, me.id, name)
        if dep is None:
            deposit_id = repo.insert_deposit(tx, me.id, name, now)
            version = 1
            if policy is not None:
                self._set_policy(tx, deposit_id, rows, policy)
        else:
            deposit_id, version = dep.id, dep.latest_version + 1
            repo.set_latest_version(tx, deposit_id, version, now)
            if policy is not None:
                self._set_policy(tx, deposit_id, rows, policy)
        self.barrier.write_version(tx, deposit_id, me.id, version, data, now)
        ctx.audit.append(me.id, action, f"{me.id}/{name}", "ok", version=version, bytes=len(data))
        return {"name": name, "owner": me.id, "version": version}

    def _may_see(self, tx: Tx, me: ClientRow, dep: DepositRow) -> bool:
        return dep.owner_id == me.id or repo.may_read(tx, dep.id, me.id)

    def get(self, ctx: Ctx, name: str, owner: str | None, version: int | None) -> dict[str, Any]:
        check_name(name)
        tx, me = ctx.tx, ctx.client
        if owner is not None and not CLIENT_ID_RE.match(owner):
            raise BadRequest("owner must be a client id")
        owner_id = owner or me.id
        target = f"{owner_id}/{name}"
        dep = repo.visible_deposit(tx, owner_id, name, me.id)
        if dep is None:
            ctx.audit.append(me.id, "get", target, "denied", reason="not found or not visible")
            raise Refused(NotFound("no such deposit"))
        v = dep.latest_version if version is None else version
        data = self.retrieve(ctx, dep, v, "get", target)
        return {"name": name, "owner": dep.owner_id, "version": v, "data": data}

    def retrieve(self, ctx: Ctx, dep: DepositRow, v: int, action: str, target: str, kv_checked: bool = False) -> bytes:
        """Version ``v`` of a deposit the caller may see, under its policy (times, retrieval
        count) and its KV v2 state (deleted, destroyed, pruned: unless the KV API, which reads
        that state itself, has checked it); every outcome audited."""
        tx, me = ctx.tx, ctx.client
        if v < 1 or v > dep.latest_version:
            ctx.audit.append(me.id, action, target, "denied", reason="no such version", version=v)
            raise Refused(NotFound(f"no version {v} of this deposit"))
        now = self.clock()
        gone = None if kv_checked else vault_rows.kv_gate(tx, dep.id, v)
        if gone is not None:
            oldest, deleted_at, destroyed = gone
            why = (
                "destroyed"
                if destroyed
                else "pruned"
                if v < oldest
                else "deleted"
                if deleted_at is not None and deleted_at <= now
                else None
            )
            if why is not None:
                ctx.audit.append(me.id, action, target, "denied", reason=f"version {why}", version=v)
                raise Refused(NotFound(f"version {v} of this deposit was {why}"))
        if dep.not_before is not None and now < dep.not_before:
            ctx.audit.append(me.id, action, target, "denied", reason="not yet retrievable")
            when = _utc(dep.not_before)
            raise Refused(Denied(f"deposit is not retrievable before {when}"))
        if dep.expires_at is not None and now >= dep.expires_at:
            ctx.audit.append(me.id, action, target, "denied", reason="expired")
            raise Refused(Gone("deposit has expired"))
        approval = self.approvals.gate(ctx, dep, action, target) if dep.approvals_required else None
        try:
            data = self.barrier.read_version(tx, dep.id, dep.owner_id, v)
        except aead.DecryptionError:
            log.error("deposit %s version %d failed authentication: the database row was altered", target, v)
            ctx.audit.append(me.id, action, target, "error", reason="ciphertext failed authentication", version=v)
            raise Refused(IntegrityFailure("deposit failed its integrity check; the operator has been told")) from None
        if not repo.count_retrieval(tx, dep.id):
            ctx.audit.append(me.id, action, target, "denied", reason="retrieval limit reached")
            raise Refused(Gone("deposit has reached its retrieval limit"))
        if approval is None:
            ctx.audit.append(me.id, action, target, "ok", version=v)
        else:
            ctx.audit.append(me.id, action, target, "ok", version=v, approval=approval)
        return data

    def _describe(self, tx: Tx, dep: DepositRow) -> dict[str, Any]:
        readers = repo.readers(tx, dep.id)
        return {
            "name": dep.name,
            "owner": dep.owner_id,
            "latest_version": dep.latest_version,
            "retrievals": dep.retrievals,
            "created": dep.created,
            "updated": dep.updated,
            "policy": {
                "readers": sorted(f"{k}:{p}" for k, p in readers),
                "expires_at": dep.expires_at,
                "not_before": dep.not_before,
                "max_retrievals": dep.max_retrievals,
                "approvers": approvals.approvers(tx, dep.id) if dep.approvals_required else [],
                "approvals_required": dep.approvals_required,
                "approval_window": dep.approval_window,
            },
        }

    def list_deposits(self, ctx: Ctx, shared: bool) -> list[dict[str, Any]]:
        tx, me = ctx.tx, ctx.client
        if shared:
            deps = [d for d in repo.deposits_with_readers(tx, me.id) if self._may_see(tx, me, d)]
        else:
            deps = repo.deposits_of(tx, me.id)
        out = [self._describe(tx, d) for d in deps]
        kmip = kmip_rows.of_deposits(tx, [d.id for d in deps])
        for d, described in zip(deps, out, strict=True):
            if d.id in kmip:
                uid, kind, state = kmip[d.id]
                described["kmip"] = {
                    "id": uid,
                    "type": kmip_rows.TYPE_NAMES.get(kind, str(kind)),
                    "state": kmip_rows.STATE_NAMES[state],
                }
        return out

    def create_empty(self, ctx: Ctx, name: str, action: str) -> DepositRow:
        """The caller's new deposit ``name`` with no version yet (KV v2 keeps metadata before
        data); its first put makes version 1, and a get before that finds no version."""
        repo.insert_deposit(ctx.tx, ctx.client.id, name, self.clock(), latest_version=0)
        ctx.audit.append(ctx.client.id, action, f"{ctx.client.id}/{name}", "ok", version=0)
        dep = repo.deposit(ctx.tx, ctx.client.id, name)
        assert dep is not None
        return dep

    def find_own(self, ctx: Ctx, name: str) -> DepositRow | None:
        """The caller's deposit ``name`` (already checked by the caller's API), if it has one."""
        return repo.deposit(ctx.tx, ctx.client.id, name)

    def _own(self, ctx: Ctx, name: str, action: str) -> DepositRow:
        check_name(name)
        dep = repo.deposit(ctx.tx, ctx.client.id, name)
        if dep is None:
            ctx.audit.append(ctx.client.id, action, f"{ctx.client.id}/{name}", "denied", reason="not found")
            raise Refused(NotFound("no such deposit of yours"))
        return dep

    def record_acl_denials(self, ctx: Ctx, events: list[dict[str, Any]]) -> dict[str, Any]:
        """Denials reported by a client's mounts (batched by the mount daemon), one audit entry each."""
        for e in events:
            outcome = "denied" if e["enforced"] else "would-deny"
            detail = {k: e[k] for k in ("program", "sha256", "uid", "path_class", "write", "count", "first_at", "last_at")}
            if e.get("reason"):
                detail["reason"] = e["reason"]
            ctx.audit.append(ctx.client.id, "acl.denial", f"volume:{e['volume']}", outcome, **detail)
        return {"recorded": len(events)}

    def delete(self, ctx: Ctx, name: str) -> dict[str, Any]:
        dep = self._own(ctx, name, "delete")
        self.barrier.destroy_deposit(ctx.tx, dep.id)
        ctx.audit.append(ctx.client.id, "delete", f"{ctx.client.id}/{name}", "ok", versions=dep.latest_version)
        return {"name": name, "deleted": True}

    def set_policy(self, ctx: Ctx, name: str, policy: Policy) -> dict[str, Any]:
        dep = self._own(ctx, name, "policy")
        rows = self._policy_rows(ctx.tx, ctx.client, policy)
        self._set_policy(ctx.tx, dep.id, rows, policy)
        ctx.audit.append(
            ctx.client.id, "policy", f"{ctx.client.id}/{name}", "ok", readers=len(rows[0]), approvers=len(rows[1]),
            approvals_required=policy.approvals_required,
        )  # fmt: skip
        fresh = repo.deposit_by_id(ctx.tx, dep.id)
        assert fresh is not None
        return self._describe(ctx.tx, fresh)
