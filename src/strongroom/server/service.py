"""The logical layer: clients, organizations, groups, deposits and policy, audit.

Every operation runs in one Store.action() transaction: authenticate (nonce recorded),
act, append the audit entry, commit.  Refusals are audited and committed, then
answered.  Plaintext comes only from the barrier.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from strongroom.crypto import aead, reqsig
from strongroom.crypto.identity import unb64u, verify
from strongroom.rng.mix import EntropyMixer
from strongroom.server import audit as audit_mod
from strongroom.server import barrier as barrier_mod
from strongroom.server import numbers, schema, vault_rows
from strongroom.server import repository as repo
from strongroom.server import storage as st
from strongroom.server.committer import GroupCommitter
from strongroom.server.datadir import DataDir, ServerConfig
from strongroom.server.errors import (
    BadRequest,
    Conflict,
    Denied,
    Gone,
    IntegrityFailure,
    NotFound,
    Refused,
    StorageUnavailable,
    TooLarge,
    TooMany,
    Unauthorized,
    Unavailable,
)
from strongroom.server.identities import (
    CLIENT_ID_RE,
    CLIENT_NAME_RE,
    SHORT_NAME_RE,
    check_name,
    new_client_id,
    new_secret,
    secret_hash,
)
from strongroom.server.messages import Checked, Policy
from strongroom.server.orgs import OrgAdmin
from strongroom.server.repository import ClientRow, DepositRow
from strongroom.server.request import SignedRequest
from strongroom.server.storage import INTEGRITY_ERRORS, Tx

log = logging.getLogger("strongroom.server")

NONCE_RE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
MAX_ENTROPY = 65536
# Bounds the API checks before anything else, on every path a request can take.
MAX_VERSION = 2**31 - 1
MAX_OWNER_CHARS = 32
REGISTER_FAILURES_PER_MINUTE = 10
REGISTER_WINDOW_SECONDS = 60

T = TypeVar("T")


def _utc(t: float) -> str:
    """A Unix time as ISO 8601 UTC; a time stored before times were bounded (the API takes 0 to
    year 9999) is shown as it is instead of failing the request."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    except (OverflowError, ValueError, OSError):
        return repr(t)


@dataclass
class Ctx:
    tx: Tx
    client: ClientRow
    audit: audit_mod.AuditWriter


class Service(OrgAdmin):
    def __init__(
        self,
        store: st.Store,
        barrier: barrier_mod.Barrier,
        datadir: DataDir,
        config: ServerConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock  # Unix time: request windows, policy times, records (tests pass their own)
        self.store = store
        self.barrier = barrier
        self.datadir = datadir
        self.config = config
        self.head_file = datadir.head_file
        self.committer = GroupCommitter(store, barrier, self.head_file)
        self._keys: dict[str, bytes] = {}
        self.entropy_mixer = EntropyMixer(config.entropy_mix)

    # -- transaction plumbing --------------------------------------------------------------
    def submit(self, fn: Callable[[Tx, audit_mod.AuditWriter], T]) -> Future[T]:
        """Queue an action for the next group commit; the future resolves after it committed."""
        return self.committer.submit(fn)

    def _action(self, fn: Callable[[Tx, audit_mod.AuditWriter], T]) -> T:
        return self.submit(fn).result()

    def signed_action(
        self, raw_path: str, checked: Checked, fn: Callable[[Ctx], T], admin: bool = False
    ) -> Callable[[Tx, audit_mod.AuditWriter], T]:
        """The action for a request whose signature was checked: authenticate, then ``fn``."""

        def run(tx: Tx, aw: audit_mod.AuditWriter) -> T:
            client = self._authenticate(tx, raw_path, aw, checked)
            if admin and client.role != "admin":
                aw.append(client.id, "admin", raw_path, "denied", reason="not an admin")
                raise Refused(Denied("this operation needs the admin credential"))
            return fn(Ctx(tx, client, aw))

        return run

    def verify_signature(self, req: SignedRequest) -> Checked:
        """Check the signature outside the write transaction; returns (client id, nonce, timestamp).

        A client's public key never changes, so it is cached; its status is not, and is read
        inside the transaction by ``_authenticate``.
        """
        h = req.headers
        client_id = h.get(reqsig.HEADER_CLIENT, "")
        ts = h.get(reqsig.HEADER_TIME, "")
        nonce = h.get(reqsig.HEADER_NONCE, "")
        sig = h.get(reqsig.HEADER_SIG, "")
        if not (client_id and ts and nonce and sig):
            raise Unauthorized("request is not signed (see docs/API.md, Authentication)")
        if not CLIENT_ID_RE.match(client_id) or not NONCE_RE.match(nonce) or numbers.whole(ts, max_len=12) is None:
            raise Unauthorized("malformed authentication headers")
        if abs(self.clock() - int(ts)) > reqsig.MAX_SKEW_SECONDS:
            raise Unauthorized("request timestamp is more than 5 minutes off the server's clock")
        try:
            signature = unb64u(sig)
        except ValueError:
            raise Unauthorized("malformed signature") from None
        public_key = self._public_key(client_id)
        message = reqsig.string_to_sign(req.method, req.raw_path, req.raw_query, req.body, ts, nonce, client_id)
        if public_key is None or not verify(public_key, signature, message):
            raise Unauthorized("unknown client or bad signature")
        return client_id, nonce, int(ts)

    def _public_key(self, client_id: str) -> bytes | None:
        key = self._keys.get(client_id)
        if key is None:
            try:
                with self.store.snapshot() as tx:
                    raw = repo.client_public_key(tx, client_id)
            except StorageUnavailable as e:
                raise Unavailable(f"database unavailable ({e})") from None
            if raw is None:
                return None
            if len(self._keys) > 100_000:
                self._keys.clear()
            key = self._keys[client_id] = raw
        return key

    def _authenticate(self, tx: Tx, raw_path: str, aw: audit_mod.AuditWriter, checked: Checked) -> ClientRow:
        client_id, nonce, ts = checked
        client = repo.client(tx, client_id)
        if client is None:
            raise Unauthorized("unknown client or bad signature")
        if client.status != "active":
            aw.append(client.id, "auth", raw_path, "denied", reason=f"client is {client.status}")
            raise Refused(Denied(f"this client is {client.status}"))
        if not repo.record_nonce(tx, ts, nonce, client_id):
            raise Unauthorized("replayed request (nonce already used)")
        return client

    # -- registration -----------------------------------------------------------------------
    def register_check(self, org: str, name: str, public_key: str, source: str) -> bytes:
        """What a registration is checked for before the database: names, the key's form.
        Returns the public key's bytes."""
        check_name(org, "organization name", SHORT_NAME_RE)
        check_name(name, "client name", CLIENT_NAME_RE)
        try:
            pub = unb64u(public_key)
        except ValueError:
            raise BadRequest("public_key must be base64url") from None
        if len(pub) != 32:
            raise BadRequest("public_key must be a 32-byte Ed25519 public key")
        return pub

    def register_action(
        self, org: str, digest: bytes, name: str, pub: bytes, source: str
    ) -> Callable[[Tx, audit_mod.AuditWriter], dict[str, Any]]:
        """The registration's transaction; ``digest`` is ``secret_hash`` of the auth secret given,
        so the secret itself goes no further than the process that received it."""

        addr = source[:64]

        def run(tx: Tx, aw: audit_mod.AuditWriter) -> dict[str, Any]:
            # Counted in the database: every worker and every server on it sees the same count.
            now = self.clock()
            if repo.registration_failures(tx, addr, now - REGISTER_WINDOW_SECONDS) >= REGISTER_FAILURES_PER_MINUTE:
                raise TooMany("too many failed registrations from this address; wait a minute")
            row = repo.org_secret(tx, org)
            expected = row[1] if row is not None else secret_hash(new_secret())
            if not hmac.compare_digest(expected, digest) or row is None:
                aw.append("anonymous", "register", org, "denied", source=source, reason="wrong organization or auth secret")
                repo.record_registration_failure(tx, addr, now, now - REGISTER_WINDOW_SECONDS)
                raise Refused(Unauthorized("wrong organization or auth secret"))
            client_id = new_client_id()
            try:
                with tx.savepoint():
                    repo.insert_client(tx, client_id, row[0], name, pub, "client", self.clock())
            except INTEGRITY_ERRORS:
                raise Conflict("this public key is already registered") from None
            aw.append(client_id, "register", org, "ok", name=name, source=source)
            return {"client_id": client_id, "org": org, "name": name}

        return run

    # -- deposits ----------------------------------------------------------------------------
    def _policy_rows(self, tx: Tx, owner: ClientRow, policy: Policy) -> list[tuple[str, str]]:
        if policy.max_retrievals is not None and policy.max_retrievals < 1:
            raise BadRequest("max_retrievals must be at least 1")
        out: list[tuple[str, str]] = []
        for r in policy.readers:
            kind, _, ident = r.partition(":")
            if kind == "client" and CLIENT_ID_RE.match(ident):
                if not repo.client_in_org(tx, ident, owner.org_id):
                    raise BadRequest(f"reader {r}: no such client in your organization")
            elif kind == "group" and SHORT_NAME_RE.match(ident):
                if repo.group_id(tx, owner.org_id, ident) is None:
                    raise BadRequest(f"reader {r}: no such group in your organization")
            else:
                raise BadRequest(f"reader {r!r}: use client:ID or group:NAME")
            out.append((kind, ident))
        return sorted(set(out))

    def _set_policy(self, tx: Tx, deposit_id: int, rows: list[tuple[str, str]], policy: Policy) -> None:
        repo.set_policy(tx, deposit_id, rows, policy.expires_at, policy.not_before, policy.max_retrievals)

    def put(self, ctx: Ctx, name: str, data: bytes, policy: Policy | None) -> dict[str, Any]:
        return self.put_named(ctx, check_name(name), data, policy, "put")

    def put_named(self, ctx: Ctx, name: str, data: bytes, policy: Policy | None, action: str) -> dict[str, Any]:
        """A new version of the caller's deposit ``name`` (already checked by the caller's API)."""
        if len(data) > self.config.deposit_limit:
            raise TooLarge(f"deposit is larger than the server's limit of {self.config.deposit_limit} bytes")
        tx, me = ctx.tx, ctx.client
        rows = self._policy_rows(tx, me, policy) if policy is not None else []
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
        try:
            data = self.barrier.read_version(tx, dep.id, dep.owner_id, v)
        except aead.DecryptionError:
            log.error("deposit %s version %d failed authentication: the database row was altered", target, v)
            ctx.audit.append(me.id, action, target, "error", reason="ciphertext failed authentication", version=v)
            raise Refused(IntegrityFailure("deposit failed its integrity check; the operator has been told")) from None
        if not repo.count_retrieval(tx, dep.id):
            ctx.audit.append(me.id, action, target, "denied", reason="retrieval limit reached")
            raise Refused(Gone("deposit has reached its retrieval limit"))
        ctx.audit.append(me.id, action, target, "ok", version=v)
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
            },
        }

    def list_deposits(self, ctx: Ctx, shared: bool) -> list[dict[str, Any]]:
        tx, me = ctx.tx, ctx.client
        if shared:
            deps = [d for d in repo.deposits_with_readers(tx, me.id) if self._may_see(tx, me, d)]
        else:
            deps = repo.deposits_of(tx, me.id)
        return [self._describe(tx, d) for d in deps]

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
        repo.delete_deposit(ctx.tx, dep.id)
        ctx.audit.append(ctx.client.id, "delete", f"{ctx.client.id}/{name}", "ok", versions=dep.latest_version)
        return {"name": name, "deleted": True}

    def set_policy(self, ctx: Ctx, name: str, policy: Policy) -> dict[str, Any]:
        dep = self._own(ctx, name, "policy")
        rows = self._policy_rows(ctx.tx, ctx.client, policy)
        self._set_policy(ctx.tx, dep.id, rows, policy)
        ctx.audit.append(ctx.client.id, "policy", f"{ctx.client.id}/{name}", "ok", readers=len(rows))
        fresh = repo.deposit_by_id(ctx.tx, dep.id)
        assert fresh is not None
        return self._describe(ctx.tx, fresh)

    def whoami(self, ctx: Ctx) -> dict[str, Any]:
        org = None
        if ctx.client.org_id is not None:
            org = repo.org_name(ctx.tx, ctx.client.org_id)
        return {"client_id": ctx.client.id, "name": ctx.client.name, "org": org, "role": ctx.client.role}

    # -- keys and seal state (admin) -----------------------------------------------------------
    def rotate_master_key(self, ctx: Ctx) -> dict[str, Any]:
        gen = self.barrier.rotate(ctx.tx)
        ctx.audit.append(ctx.client.id, "rotate-master-key", "", "ok", generation=gen)
        return {"generation": gen}

    def after_rotation(self) -> None:
        with self.store.exclusive() as tx:
            self.barrier.refresh(tx)

    def seal(self, ctx: Ctx) -> dict[str, Any]:
        epoch = int(repo.get_meta(ctx.tx, "seal_epoch") or "1") + 1
        repo.set_meta(ctx.tx, "seal_epoch", str(epoch))
        repo.delete_grants(ctx.tx)
        ctx.audit.append(ctx.client.id, "seal", "", "ok", epoch=epoch)
        return {"sealed": True, "epoch": epoch}

    def unseal(self, req: SignedRequest, passphrase: str) -> dict[str, Any]:
        """Authenticate an admin without the audit key, derive U, unseal, then audit."""
        checked = self.verify_signature(req)  # before the write lock, as for every signed request
        try:
            with self.store.action() as (tx, _seq, _mac):
                client = self._authenticate(tx, req.raw_path, _NullAudit(), checked)  # type: ignore[arg-type]
                if client.role != "admin":
                    raise Denied("unsealing needs the admin credential")
                epoch = int(repo.get_meta(tx, "seal_epoch") or "1")
        except Refused as r:
            raise r.error from None
        except StorageUnavailable as e:
            raise Unavailable(f"database unavailable ({e})") from None
        with self.store.exclusive() as tx:
            try:
                unseal_key = barrier_mod.derive_unseal_key(tx, passphrase)
            except (barrier_mod.WrongPassphrase, ValueError):
                unseal_key = None
        if unseal_key is None:
            log.warning("unseal refused: wrong passphrase (client %s)", client.id)
            if self.barrier.sealed:  # no audit entry can be chained yet: held for the next unseal
                self._hold_for_audit(client.id, "unseal", "denied", reason="wrong passphrase")
                raise Denied("wrong passphrase")

            def refuse(_tx: Tx, aw: audit_mod.AuditWriter) -> None:
                aw.append(client.id, "unseal", "", "denied", reason="wrong passphrase")
                raise Refused(Denied("wrong passphrase"))

            self._action(refuse)
        if not self.barrier.sealed:
            self._action(lambda tx, aw: aw.append(client.id, "unseal", "", "ok", epoch=epoch, changed=False))
            return {"sealed": False, "changed": False}
        with self.store.exclusive() as tx:
            assert unseal_key is not None
            self.barrier.unseal(tx, unseal_key, epoch)

        def record(tx: Tx, aw: audit_mod.AuditWriter) -> None:
            for ts, actor, action, outcome, detail in repo.held_events(tx):
                aw.append(actor, action, "", outcome, while_sealed_at=ts, **json.loads(detail))
            repo.clear_held_events(tx)
            aw.append(client.id, "unseal", "", "ok", epoch=epoch, changed=True)

        self._action(record)
        return {"sealed": False, "changed": True}

    def _hold_for_audit(self, actor: str, action: str, outcome: str, **detail: Any) -> None:
        """Keep a refusal made while sealed for the next unseal to chain (bounded)."""
        try:
            with self.store.exclusive() as tx:
                if repo.count_held_events(tx) >= schema.MAX_SEALED_EVENTS:
                    held = schema.MAX_SEALED_EVENTS
                    log.warning("while sealed, a refusal was not kept for the audit log (%d already held)", held)
                    return
                repo.hold_event(
                    tx, self.clock(), actor, action, outcome, json.dumps(detail, separators=(",", ":"), sort_keys=True)
                )
        except StorageUnavailable as e:
            log.warning("while sealed, a refusal was not kept for the audit log: database unavailable (%s)", e)

    def audit_tail(self, ctx: Ctx, after: int, limit: int) -> list[dict[str, Any]]:
        ctx.audit.write_rows()  # this batch's entries so far, as a reader after it would see them
        rows = repo.audit_entries(ctx.tx, after, limit)
        return [
            {"seq": r[0], "ts": r[1], "actor": r[2], "action": r[3], "target": r[4], "outcome": r[5], "detail": json.loads(r[6])}
            for r in rows
        ]

    # -- entropy ----------------------------------------------------------------------------------
    def entropy(self, ctx: Ctx, n: int) -> bytes:
        if not 1 <= n <= MAX_ENTROPY:
            raise BadRequest(f"bytes must be between 1 and {MAX_ENTROPY}")
        return self.entropy_mixer.random(n)


class _NullAudit:
    """Stands in for the audit writer while sealed: nothing can be chained without the key."""

    def append(self, *args: Any, **kwargs: Any) -> None:
        log.warning("while sealed, an authentication refusal was not audited: %s", args[:4])
