"""The logical layer: clients, organizations, groups, deposits and policy, audit.

Every operation runs in one Store.action() transaction: authenticate (nonce recorded),
act, append the audit entry, commit.  Refusals are audited and committed, then
answered.  Plaintext comes only from the barrier.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import IntegrityError

from strongroom.crypto import aead, reqsig
from strongroom.crypto.identity import b64u, unb64u, verify
from strongroom.server import audit as audit_mod
from strongroom.server import barrier as barrier_mod
from strongroom.server import storage as st
from strongroom.server.datadir import DataDir, ServerConfig
from strongroom.server.errors import (
    ApiError,
    BadRequest,
    Conflict,
    Denied,
    Gone,
    IntegrityFailure,
    NotFound,
    Refused,
    Sealed,
    StorageUnavailable,
    TooLarge,
    TooMany,
    Unauthorized,
    Unavailable,
)

log = logging.getLogger("strongroom.server")

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SHORT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
CLIENT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
CLIENT_ID_RE = re.compile(r"^c_[A-Za-z0-9_-]{16}$")
NONCE_RE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
MAX_ENTROPY = 65536
REGISTER_FAILURES_PER_MINUTE = 10

T = TypeVar("T")


@dataclass(frozen=True)
class SignedRequest:
    method: str
    raw_path: str
    raw_query: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class Policy:
    readers: tuple[str, ...] = ()
    expires_at: float | None = None
    not_before: float | None = None
    max_retrievals: int | None = None


@dataclass
class Ctx:
    conn: Connection
    client: Row[Any]
    audit: audit_mod.AuditWriter


def check_name(name: str, what: str = "deposit name", pattern: re.Pattern[str] = NAME_RE) -> str:
    if not isinstance(name, str) or not pattern.match(name):
        raise BadRequest(f"bad {what}: use letters, digits, '.', '_' and '-', starting with a letter or digit")
    return name


def secret_hash(secret: str) -> bytes:
    # Auth secrets are 256-bit random strings, so a plain hash is enough to keep them
    # out of the database; no passphrase-grade stretching is needed.
    return hashlib.sha256(b"strongroom org secret v1\0" + secret.encode()).digest()


def new_secret() -> str:
    return b64u(os.urandom(32))


def new_client_id() -> str:
    return "c_" + b64u(os.urandom(12))


class RegistrationLimiter:
    """Failed registrations per source address in a sliding minute (per server process)."""

    def __init__(self, limit: int = REGISTER_FAILURES_PER_MINUTE) -> None:
        self.limit = limit
        self._fails: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, addr: str) -> None:
        now = time.monotonic()
        with self._lock:
            q = self._fails.get(addr)
            while q and q[0] < now - 60:
                q.popleft()
            if q is not None and len(q) >= self.limit:
                raise TooMany("too many failed registrations from this address; wait a minute")

    def fail(self, addr: str) -> None:
        with self._lock:
            if len(self._fails) > 100_000:
                self._fails.clear()  # bound memory under address-spraying
            self._fails.setdefault(addr, deque()).append(time.monotonic())


class Service:
    def __init__(self, store: st.Store, barrier: barrier_mod.Barrier, datadir: DataDir, config: ServerConfig) -> None:
        self.store = store
        self.barrier = barrier
        self.datadir = datadir
        self.config = config
        self.head_file = datadir.head_file
        self.limiter = RegistrationLimiter()

    # -- transaction plumbing --------------------------------------------------------------
    def _action(self, fn: Callable[[Connection, audit_mod.AuditWriter], T]) -> T:
        try:
            key = self.barrier.audit_key()
        except barrier_mod.SealedError:
            raise Sealed("the server is sealed; unseal it with 'strongroom server unseal'") from None
        refused: ApiError | None = None
        try:
            with self.store.action() as (conn, seq, mac):
                aw = audit_mod.AuditWriter(conn, seq, mac, key)
                try:
                    result = fn(conn, aw)
                except Refused as r:
                    refused = r.error
        except StorageUnavailable as e:
            raise Unavailable(f"database unavailable ({e})") from None
        self.head_file.advance(aw.seq, aw.mac)
        if refused is not None:
            raise refused
        return result

    def signed(self, req: SignedRequest, fn: Callable[[Ctx], T], admin: bool = False) -> T:
        def run(conn: Connection, aw: audit_mod.AuditWriter) -> T:
            client = self._authenticate(conn, req, aw)
            if admin and client.role != "admin":
                aw.append(client.id, "admin", req.raw_path, "denied", reason="not an admin")
                raise Refused(Denied("this operation needs the admin credential"))
            return fn(Ctx(conn, client, aw))

        return self._action(run)

    def _authenticate(self, conn: Connection, req: SignedRequest, aw: audit_mod.AuditWriter) -> Row[Any]:
        h = req.headers
        client_id = h.get(reqsig.HEADER_CLIENT, "")
        ts = h.get(reqsig.HEADER_TIME, "")
        nonce = h.get(reqsig.HEADER_NONCE, "")
        sig = h.get(reqsig.HEADER_SIG, "")
        if not (client_id and ts and nonce and sig):
            raise Unauthorized("request is not signed (see docs/API.md, Authentication)")
        if not CLIENT_ID_RE.match(client_id) or not NONCE_RE.match(nonce) or not ts.isdigit() or len(ts) > 12:
            raise Unauthorized("malformed authentication headers")
        if abs(time.time() - int(ts)) > reqsig.MAX_SKEW_SECONDS:
            raise Unauthorized("request timestamp is more than 5 minutes off the server's clock")
        try:
            signature = unb64u(sig)
        except ValueError:
            raise Unauthorized("malformed signature") from None
        client = conn.execute(select(st.clients).where(st.clients.c.id == client_id)).one_or_none()
        message = reqsig.string_to_sign(req.method, req.raw_path, req.raw_query, req.body, ts, nonce, client_id)
        if client is None or not verify(client.public_key, signature, message):
            raise Unauthorized("unknown client or bad signature")
        if client.status != "active":
            aw.append(client.id, "auth", req.raw_path, "denied", reason=f"client is {client.status}")
            raise Refused(Denied(f"this client is {client.status}"))
        try:
            with conn.begin_nested():
                conn.execute(
                    st.nonces.insert().values(client_id=client_id, nonce=nonce, expires=int(ts) + 2 * reqsig.MAX_SKEW_SECONDS)
                )
        except IntegrityError:
            raise Unauthorized("replayed request (nonce already used)") from None
        return client

    # -- registration -----------------------------------------------------------------------
    def register(self, org: str, auth_secret: str, name: str, public_key: str, source: str) -> dict[str, Any]:
        self.limiter.check(source)
        check_name(org, "organization name", SHORT_NAME_RE)
        check_name(name, "client name", CLIENT_NAME_RE)
        try:
            pub = unb64u(public_key)
        except ValueError:
            raise BadRequest("public_key must be base64url") from None
        if len(pub) != 32:
            raise BadRequest("public_key must be a 32-byte Ed25519 public key")

        def run(conn: Connection, aw: audit_mod.AuditWriter) -> dict[str, Any]:
            row = conn.execute(select(st.orgs).where(st.orgs.c.name == org)).one_or_none()
            expected = row.secret_hash if row is not None else secret_hash(new_secret())
            if not hmac.compare_digest(expected, secret_hash(auth_secret)) or row is None:
                self.limiter.fail(source)
                aw.append("anonymous", "register", org, "denied", source=source, reason="wrong organization or auth secret")
                raise Refused(Unauthorized("wrong organization or auth secret"))
            client_id = new_client_id()
            try:
                with conn.begin_nested():
                    conn.execute(
                        st.clients.insert().values(
                            id=client_id,
                            org_id=row.id,
                            name=name,
                            public_key=pub,
                            role="client",
                            status="active",
                            created=time.time(),
                        )
                    )
            except IntegrityError:
                raise Conflict("this public key is already registered") from None
            aw.append(client_id, "register", org, "ok", name=name, source=source)
            return {"client_id": client_id, "org": org, "name": name}

        return self._action(run)

    # -- deposits ----------------------------------------------------------------------------
    def _policy_rows(self, conn: Connection, owner: Row[Any], policy: Policy) -> list[tuple[str, str]]:
        if policy.max_retrievals is not None and policy.max_retrievals < 1:
            raise BadRequest("max_retrievals must be at least 1")
        out: list[tuple[str, str]] = []
        for r in policy.readers:
            kind, _, ident = r.partition(":")
            if kind == "client" and CLIENT_ID_RE.match(ident):
                exists = conn.execute(
                    select(st.clients.c.id).where(st.clients.c.id == ident, st.clients.c.org_id == owner.org_id)
                ).one_or_none()
                if exists is None:
                    raise BadRequest(f"reader {r}: no such client in your organization")
            elif kind == "group" and SHORT_NAME_RE.match(ident):
                exists = conn.execute(
                    select(st.groups.c.id).where(st.groups.c.name == ident, st.groups.c.org_id == owner.org_id)
                ).one_or_none()
                if exists is None:
                    raise BadRequest(f"reader {r}: no such group in your organization")
            else:
                raise BadRequest(f"reader {r!r}: use client:ID or group:NAME")
            out.append((kind, ident))
        return sorted(set(out))

    def _set_policy(self, conn: Connection, deposit_id: int, rows: list[tuple[str, str]], policy: Policy) -> None:
        conn.execute(delete(st.deposit_readers).where(st.deposit_readers.c.deposit_id == deposit_id))
        for kind, ident in rows:
            conn.execute(st.deposit_readers.insert().values(deposit_id=deposit_id, kind=kind, principal=ident))
        conn.execute(
            update(st.deposits)
            .where(st.deposits.c.id == deposit_id)
            .values(expires_at=policy.expires_at, not_before=policy.not_before, max_retrievals=policy.max_retrievals)
        )

    def put(self, ctx: Ctx, name: str, data: bytes, policy: Policy | None) -> dict[str, Any]:
        check_name(name)
        if len(data) > self.config.deposit_limit:
            raise TooLarge(f"deposit is larger than the server's limit of {self.config.deposit_limit} bytes")
        conn, me = ctx.conn, ctx.client
        rows = self._policy_rows(conn, me, policy) if policy is not None else []
        now = time.time()
        dep = conn.execute(select(st.deposits).where(st.deposits.c.owner_id == me.id, st.deposits.c.name == name)).one_or_none()
        if dep is None:
            deposit_id = conn.execute(
                st.deposits.insert()
                .values(owner_id=me.id, name=name, latest_version=1, retrievals=0, created=now, updated=now)
                .returning(st.deposits.c.id)
            ).scalar_one()
            version = 1
            self._set_policy(conn, deposit_id, rows, policy or Policy())
        else:
            deposit_id, version = dep.id, dep.latest_version + 1
            conn.execute(update(st.deposits).where(st.deposits.c.id == deposit_id).values(latest_version=version, updated=now))
            if policy is not None:
                self._set_policy(conn, deposit_id, rows, policy)
        gen, wrapped, ct = self.barrier.seal_deposit(conn, deposit_id, me.id, version, data)
        conn.execute(
            st.deposit_versions.insert().values(
                deposit_id=deposit_id, version=version, master_gen=gen, wrapped_key=wrapped, ciphertext=ct, created=now
            )
        )
        ctx.audit.append(me.id, "put", f"{me.id}/{name}", "ok", version=version, bytes=len(data))
        return {"name": name, "owner": me.id, "version": version}

    def _may_see(self, conn: Connection, me: Row[Any], dep: Row[Any]) -> bool:
        if dep.owner_id == me.id:
            return True
        member_groups = (
            select(st.groups.c.name)
            .join(st.group_members, st.group_members.c.group_id == st.groups.c.id)
            .where(st.group_members.c.client_id == me.id)
        )
        hit = conn.execute(
            select(st.deposit_readers.c.kind)
            .where(
                st.deposit_readers.c.deposit_id == dep.id,
                or_(
                    and_(st.deposit_readers.c.kind == "client", st.deposit_readers.c.principal == me.id),
                    and_(st.deposit_readers.c.kind == "group", st.deposit_readers.c.principal.in_(member_groups)),
                ),
            )
            .limit(1)
        ).first()
        return hit is not None

    def get(self, ctx: Ctx, name: str, owner: str | None, version: int | None) -> dict[str, Any]:
        check_name(name)
        conn, me = ctx.conn, ctx.client
        owner_id = owner or me.id
        target = f"{owner_id}/{name}"
        if owner is not None and not CLIENT_ID_RE.match(owner):
            raise BadRequest("owner must be a client id")
        dep = conn.execute(
            select(st.deposits).where(st.deposits.c.owner_id == owner_id, st.deposits.c.name == name)
        ).one_or_none()
        if dep is None or not self._may_see(conn, me, dep):
            ctx.audit.append(me.id, "get", target, "denied", reason="not found or not visible")
            raise Refused(NotFound("no such deposit"))
        v = dep.latest_version if version is None else version
        if v < 1 or v > dep.latest_version:
            ctx.audit.append(me.id, "get", target, "denied", reason="no such version", version=v)
            raise Refused(NotFound(f"no version {v} of this deposit"))
        now = time.time()
        if dep.not_before is not None and now < dep.not_before:
            ctx.audit.append(me.id, "get", target, "denied", reason="not yet retrievable")
            raise Refused(
                Denied(f"deposit is not retrievable before {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(dep.not_before))}")
            )
        if dep.expires_at is not None and now >= dep.expires_at:
            ctx.audit.append(me.id, "get", target, "denied", reason="expired")
            raise Refused(Gone("deposit has expired"))
        row = conn.execute(
            select(st.deposit_versions).where(st.deposit_versions.c.deposit_id == dep.id, st.deposit_versions.c.version == v)
        ).one()
        try:
            data = self.barrier.open_deposit(conn, dep.id, dep.owner_id, v, row.master_gen, row.wrapped_key, row.ciphertext)
        except aead.DecryptionError:
            log.error("deposit %s version %d failed authentication: the database row was altered", target, v)
            ctx.audit.append(me.id, "get", target, "error", reason="ciphertext failed authentication", version=v)
            raise Refused(IntegrityFailure("deposit failed its integrity check; the operator has been told")) from None
        # One conditional update makes the retrieval count exact under concurrency.
        counted = conn.execute(
            update(st.deposits)
            .where(
                st.deposits.c.id == dep.id,
                or_(st.deposits.c.max_retrievals.is_(None), st.deposits.c.retrievals < st.deposits.c.max_retrievals),
            )
            .values(retrievals=st.deposits.c.retrievals + 1)
        ).rowcount
        if counted != 1:
            ctx.audit.append(me.id, "get", target, "denied", reason="retrieval limit reached")
            raise Refused(Gone("deposit has reached its retrieval limit"))
        ctx.audit.append(me.id, "get", target, "ok", version=v)
        return {"name": name, "owner": dep.owner_id, "version": v, "data": data}

    def _describe(self, conn: Connection, dep: Row[Any]) -> dict[str, Any]:
        readers = conn.execute(
            select(st.deposit_readers.c.kind, st.deposit_readers.c.principal).where(st.deposit_readers.c.deposit_id == dep.id)
        ).all()
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
        conn, me = ctx.conn, ctx.client
        if shared:
            candidates = conn.execute(
                select(st.deposits)
                .join(st.deposit_readers, st.deposit_readers.c.deposit_id == st.deposits.c.id)
                .where(st.deposits.c.owner_id != me.id)
                .distinct()
                .order_by(st.deposits.c.owner_id, st.deposits.c.name)
            ).all()
            deps = [d for d in candidates if self._may_see(conn, me, d)]
        else:
            deps = list(
                conn.execute(select(st.deposits).where(st.deposits.c.owner_id == me.id).order_by(st.deposits.c.name)).all()
            )
        return [self._describe(conn, d) for d in deps]

    def _own(self, ctx: Ctx, name: str, action: str) -> Row[Any]:
        check_name(name)
        dep = ctx.conn.execute(
            select(st.deposits).where(st.deposits.c.owner_id == ctx.client.id, st.deposits.c.name == name)
        ).one_or_none()
        if dep is None:
            ctx.audit.append(ctx.client.id, action, f"{ctx.client.id}/{name}", "denied", reason="not found")
            raise Refused(NotFound("no such deposit of yours"))
        return dep

    def delete(self, ctx: Ctx, name: str) -> dict[str, Any]:
        dep = self._own(ctx, name, "delete")
        for t in (st.deposit_versions, st.deposit_readers):
            ctx.conn.execute(delete(t).where(t.c.deposit_id == dep.id))
        ctx.conn.execute(delete(st.deposits).where(st.deposits.c.id == dep.id))
        ctx.audit.append(ctx.client.id, "delete", f"{ctx.client.id}/{name}", "ok", versions=dep.latest_version)
        return {"name": name, "deleted": True}

    def set_policy(self, ctx: Ctx, name: str, policy: Policy) -> dict[str, Any]:
        dep = self._own(ctx, name, "policy")
        rows = self._policy_rows(ctx.conn, ctx.client, policy)
        self._set_policy(ctx.conn, dep.id, rows, policy)
        ctx.audit.append(ctx.client.id, "policy", f"{ctx.client.id}/{name}", "ok", readers=len(rows))
        fresh = ctx.conn.execute(select(st.deposits).where(st.deposits.c.id == dep.id)).one()
        return self._describe(ctx.conn, fresh)

    def whoami(self, ctx: Ctx) -> dict[str, Any]:
        org = None
        if ctx.client.org_id is not None:
            org = ctx.conn.execute(select(st.orgs.c.name).where(st.orgs.c.id == ctx.client.org_id)).scalar_one()
        return {"client_id": ctx.client.id, "name": ctx.client.name, "org": org, "role": ctx.client.role}

    # -- organizations, clients, groups (admin) ------------------------------------------------
    def create_org(self, ctx: Ctx, name: str) -> dict[str, Any]:
        check_name(name, "organization name", SHORT_NAME_RE)
        secret = new_secret()
        try:
            with ctx.conn.begin_nested():
                ctx.conn.execute(st.orgs.insert().values(name=name, secret_hash=secret_hash(secret), created=time.time()))
        except IntegrityError:
            raise Conflict(f"organization {name} exists") from None
        ctx.audit.append(ctx.client.id, "org.create", name, "ok")
        return {"name": name, "auth_secret": secret}

    def list_orgs(self, ctx: Ctx) -> list[dict[str, Any]]:
        counts: dict[int, int] = dict(
            ctx.conn.execute(select(st.clients.c.org_id, func.count()).group_by(st.clients.c.org_id)).tuples().all()
        )
        return [
            {"name": o.name, "created": o.created, "clients": counts.get(o.id, 0)}
            for o in ctx.conn.execute(select(st.orgs).order_by(st.orgs.c.name)).all()
        ]

    def _org(self, ctx: Ctx, name: str) -> Row[Any]:
        check_name(name, "organization name", SHORT_NAME_RE)
        row = ctx.conn.execute(select(st.orgs).where(st.orgs.c.name == name)).one_or_none()
        if row is None:
            raise NotFound(f"no organization {name}")
        return row

    def rotate_org_secret(self, ctx: Ctx, name: str) -> dict[str, Any]:
        org = self._org(ctx, name)
        secret = new_secret()
        ctx.conn.execute(update(st.orgs).where(st.orgs.c.id == org.id).values(secret_hash=secret_hash(secret)))
        ctx.audit.append(ctx.client.id, "org.rotate-secret", name, "ok")
        return {"name": name, "auth_secret": secret}

    def list_clients(self, ctx: Ctx) -> list[dict[str, Any]]:
        org_names = dict(ctx.conn.execute(select(st.orgs.c.id, st.orgs.c.name)).tuples().all())
        return [
            {
                "client_id": c.id,
                "name": c.name,
                "org": org_names.get(c.org_id),
                "role": c.role,
                "status": c.status,
                "created": c.created,
            }
            for c in ctx.conn.execute(select(st.clients).order_by(st.clients.c.created)).all()
        ]

    def set_client_status(self, ctx: Ctx, client_id: str, status: str) -> dict[str, Any]:
        if not CLIENT_ID_RE.match(client_id):
            raise BadRequest("bad client id")
        row = ctx.conn.execute(select(st.clients).where(st.clients.c.id == client_id)).one_or_none()
        if row is None:
            raise NotFound(f"no client {client_id}")
        if row.role == "admin":
            raise Conflict("the admin credential cannot be disabled or revoked here")
        if row.status == "revoked" and status != "revoked":
            raise Conflict("a revoked client stays revoked; register the host again")
        ctx.conn.execute(update(st.clients).where(st.clients.c.id == client_id).values(status=status))
        verb = {"active": "enable", "disabled": "disable", "revoked": "revoke"}[status]
        ctx.audit.append(ctx.client.id, f"client.{verb}", client_id, "ok")
        return {"client_id": client_id, "status": status}

    def _group(self, ctx: Ctx, org: str, name: str) -> tuple[Row[Any], Row[Any] | None]:
        o = self._org(ctx, org)
        check_name(name, "group name", SHORT_NAME_RE)
        g = ctx.conn.execute(select(st.groups).where(st.groups.c.org_id == o.id, st.groups.c.name == name)).one_or_none()
        return o, g

    def create_group(self, ctx: Ctx, org: str, name: str) -> dict[str, Any]:
        o, g = self._group(ctx, org, name)
        if g is not None:
            raise Conflict(f"group {name} exists in {org}")
        ctx.conn.execute(st.groups.insert().values(org_id=o.id, name=name))
        ctx.audit.append(ctx.client.id, "group.create", f"{org}/{name}", "ok")
        return {"org": org, "name": name, "members": []}

    def _members(self, ctx: Ctx, group_id: int) -> list[str]:
        return sorted(
            ctx.conn.execute(select(st.group_members.c.client_id).where(st.group_members.c.group_id == group_id)).scalars()
        )

    def list_groups(self, ctx: Ctx, org: str) -> list[dict[str, Any]]:
        o = self._org(ctx, org)
        gs = ctx.conn.execute(select(st.groups).where(st.groups.c.org_id == o.id).order_by(st.groups.c.name)).all()
        return [{"org": org, "name": g.name, "members": self._members(ctx, g.id)} for g in gs]

    def change_group(self, ctx: Ctx, org: str, name: str, add: list[str], remove: list[str]) -> dict[str, Any]:
        o, g = self._group(ctx, org, name)
        if g is None:
            raise NotFound(f"no group {name} in {org}")
        for cid in add + remove:
            if not CLIENT_ID_RE.match(cid):
                raise BadRequest(f"bad client id {cid!r}")
        for cid in add:
            ok = ctx.conn.execute(
                select(st.clients.c.id).where(st.clients.c.id == cid, st.clients.c.org_id == o.id)
            ).one_or_none()
            if ok is None:
                raise BadRequest(f"client {cid} is not in organization {org}")
            present = ctx.conn.execute(
                select(st.group_members).where(st.group_members.c.group_id == g.id, st.group_members.c.client_id == cid)
            ).one_or_none()
            if present is None:
                ctx.conn.execute(st.group_members.insert().values(group_id=g.id, client_id=cid))
        for cid in remove:
            ctx.conn.execute(
                delete(st.group_members).where(st.group_members.c.group_id == g.id, st.group_members.c.client_id == cid)
            )
        ctx.audit.append(ctx.client.id, "group.change", f"{org}/{name}", "ok", added=add, removed=remove)
        return {"org": org, "name": name, "members": self._members(ctx, g.id)}

    def delete_group(self, ctx: Ctx, org: str, name: str) -> dict[str, Any]:
        _o, g = self._group(ctx, org, name)
        if g is None:
            raise NotFound(f"no group {name} in {org}")
        ctx.conn.execute(delete(st.group_members).where(st.group_members.c.group_id == g.id))
        ctx.conn.execute(
            delete(st.deposit_readers).where(st.deposit_readers.c.kind == "group", st.deposit_readers.c.principal == name)
        )
        ctx.conn.execute(delete(st.groups).where(st.groups.c.id == g.id))
        ctx.audit.append(ctx.client.id, "group.delete", f"{org}/{name}", "ok")
        return {"org": org, "name": name, "deleted": True}

    # -- keys and seal state (admin) -----------------------------------------------------------
    def rotate_master_key(self, ctx: Ctx) -> dict[str, Any]:
        gen = self.barrier.rotate(ctx.conn)
        ctx.audit.append(ctx.client.id, "rotate-master-key", "", "ok", generation=gen)
        return {"generation": gen}

    def after_rotation(self) -> None:
        with self.store.read() as conn:
            self.barrier.refresh(conn)

    def seal(self, ctx: Ctx) -> dict[str, Any]:
        epoch = int(st.get_meta(ctx.conn, "seal_epoch") or "1") + 1
        st.set_meta(ctx.conn, "seal_epoch", str(epoch))
        ctx.conn.execute(delete(st.grants))
        ctx.audit.append(ctx.client.id, "seal", "", "ok", epoch=epoch)
        return {"sealed": True, "epoch": epoch}

    def unseal(self, req: SignedRequest, passphrase: str) -> dict[str, Any]:
        """Authenticate an admin without the audit key, derive U, unseal, then audit."""
        try:
            with self.store.action() as (conn, _seq, _mac):
                client = self._authenticate(conn, req, _NullAudit())  # type: ignore[arg-type]
                if client.role != "admin":
                    raise Denied("unsealing needs the admin credential")
                epoch = int(st.get_meta(conn, "seal_epoch") or "1")
        except Refused as r:
            raise r.error from None
        except StorageUnavailable as e:
            raise Unavailable(f"database unavailable ({e})") from None
        if not self.barrier.sealed:
            return {"sealed": False, "changed": False}
        with self.store.read() as conn:
            try:
                unseal_key = barrier_mod.derive_unseal_key(conn, passphrase)
            except (barrier_mod.WrongPassphrase, ValueError):
                log.warning("unseal refused: wrong passphrase (client %s)", client.id)
                raise Denied("wrong passphrase") from None
            self.barrier.unseal(conn, unseal_key, epoch)
        self._action(lambda conn, aw: aw.append(client.id, "unseal", "", "ok", epoch=epoch))
        return {"sealed": False, "changed": True}

    def audit_tail(self, ctx: Ctx, after: int, limit: int) -> list[dict[str, Any]]:
        rows = ctx.conn.execute(
            select(st.audit)
            .where(st.audit.c.seq > after)
            .order_by(st.audit.c.seq.desc() if after < 0 else st.audit.c.seq)
            .limit(limit)
        ).all()
        if after < 0:
            rows = list(reversed(rows))
        return [
            {
                "seq": r.seq,
                "ts": r.ts,
                "actor": r.actor,
                "action": r.action,
                "target": r.target,
                "outcome": r.outcome,
                "detail": json.loads(r.detail),
            }
            for r in rows
        ]

    # -- entropy ----------------------------------------------------------------------------------
    def entropy(self, ctx: Ctx, n: int) -> bytes:
        if not 1 <= n <= MAX_ENTROPY:
            raise BadRequest(f"bytes must be between 1 and {MAX_ENTROPY}")
        return os.urandom(n)  # getrandom(2), looping until all n bytes are read


class _NullAudit:
    """Stands in for the audit writer while sealed: nothing can be chained without the key."""

    def append(self, *args: Any, **kwargs: Any) -> None:
        log.warning("while sealed, an authentication refusal was not audited: %s", args[:4])
