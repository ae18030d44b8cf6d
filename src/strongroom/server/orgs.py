"""The admin's organizations, clients and groups: who may register and who may read what, each
action audited in its transaction (the routes check the admin role, actions.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from strongroom.server import repository as repo
from strongroom.server import vault_rows
from strongroom.server.ctx import Ctx
from strongroom.server.errors import BadRequest, Conflict, NotFound
from strongroom.server.identities import CLIENT_ID_RE, SHORT_NAME_RE, check_name, new_client_id, new_secret, secret_hash
from strongroom.server.storage import INTEGRITY_ERRORS


class Orgs:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock

    def create_org(self, ctx: Ctx, name: str) -> dict[str, Any]:
        check_name(name, "organization name", SHORT_NAME_RE)
        secret = new_secret()
        try:
            with ctx.tx.savepoint():
                repo.insert_org(ctx.tx, name, secret_hash(secret), self.clock())
        except INTEGRITY_ERRORS:
            raise Conflict(f"organization {name} exists") from None
        ctx.audit.append(ctx.client.id, "org.create", name, "ok")
        return {"name": name, "auth_secret": secret}

    def list_orgs(self, ctx: Ctx) -> list[dict[str, Any]]:
        counts = repo.client_counts(ctx.tx)
        return [
            {"name": name, "created": created, "clients": counts.get(org, 0)} for org, name, created in repo.list_orgs(ctx.tx)
        ]

    def _org_id(self, ctx: Ctx, name: str) -> int:
        check_name(name, "organization name", SHORT_NAME_RE)
        org = repo.org_id(ctx.tx, name)
        if org is None:
            raise NotFound(f"no organization {name}")
        return org

    def rotate_org_secret(self, ctx: Ctx, name: str) -> dict[str, Any]:
        org_id = self._org_id(ctx, name)
        secret = new_secret()
        repo.set_org_secret(ctx.tx, org_id, secret_hash(secret))
        ctx.audit.append(ctx.client.id, "org.rotate-secret", name, "ok")
        return {"name": name, "auth_secret": secret}

    def list_clients(self, ctx: Ctx) -> list[dict[str, Any]]:
        rows = repo.list_clients(ctx.tx)
        keys = ("client_id", "name", "org", "role", "status", "created")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def create_admin(self, ctx: Ctx, name: str, public_key: bytes) -> dict[str, Any]:
        """Another admin credential (its key made on its holder's host): share holders who each
        give their own unseal or rekey share under their own name."""
        check_name(name, "admin name", SHORT_NAME_RE)
        if len(public_key) != 32:
            raise BadRequest("public_key must be a 32-byte Ed25519 public key")
        client_id = new_client_id()
        try:
            with ctx.tx.savepoint():
                repo.insert_client(ctx.tx, client_id, None, name, public_key, "admin", self.clock())
        except INTEGRITY_ERRORS:
            raise Conflict("that public key is registered already") from None
        ctx.audit.append(ctx.client.id, "admin.create", client_id, "ok", name=name)
        return {"client_id": client_id, "name": name, "role": "admin"}

    def set_client_status(self, ctx: Ctx, client_id: str, status: str) -> dict[str, Any]:
        if not CLIENT_ID_RE.match(client_id):
            raise BadRequest("bad client id")
        row = repo.client(ctx.tx, client_id)
        if row is None:
            raise NotFound(f"no client {client_id}")
        if row.role == "admin":
            raise Conflict("the admin credential cannot be disabled or revoked here")
        if row.status == "revoked" and status != "revoked":
            raise Conflict("a revoked client stays revoked; register the host again")
        repo.set_client_status(ctx.tx, client_id, status)
        if status == "revoked":
            vault_rows.revoke_client_tokens(ctx.tx, client_id)  # a revoked client's Vault tokens die with it
        verb = {"active": "enable", "disabled": "disable", "revoked": "revoke"}[status]
        ctx.audit.append(ctx.client.id, f"client.{verb}", client_id, "ok")
        return {"client_id": client_id, "status": status}

    def _group(self, ctx: Ctx, org: str, name: str) -> tuple[int, int | None]:
        org_id = self._org_id(ctx, org)
        check_name(name, "group name", SHORT_NAME_RE)
        return org_id, repo.group_id(ctx.tx, org_id, name)

    def create_group(self, ctx: Ctx, org: str, name: str) -> dict[str, Any]:
        org_id, gid = self._group(ctx, org, name)
        if gid is not None:
            raise Conflict(f"group {name} exists in {org}")
        repo.insert_group(ctx.tx, org_id, name)
        ctx.audit.append(ctx.client.id, "group.create", f"{org}/{name}", "ok")
        return {"org": org, "name": name, "members": []}

    def list_groups(self, ctx: Ctx, org: str) -> list[dict[str, Any]]:
        org_id = self._org_id(ctx, org)
        return [{"org": org, "name": name, "members": repo.members(ctx.tx, gid)} for gid, name in repo.groups_of(ctx.tx, org_id)]

    def change_group(self, ctx: Ctx, org: str, name: str, add: list[str], remove: list[str]) -> dict[str, Any]:
        org_id, gid = self._group(ctx, org, name)
        if gid is None:
            raise NotFound(f"no group {name} in {org}")
        for cid in add + remove:
            if not CLIENT_ID_RE.match(cid):
                raise BadRequest(f"bad client id {cid!r}")
        for cid in add:
            if not repo.client_in_org(ctx.tx, cid, org_id):
                raise BadRequest(f"client {cid} is not in organization {org}")
            repo.add_member(ctx.tx, gid, cid)
        for cid in remove:
            repo.remove_member(ctx.tx, gid, cid)
        ctx.audit.append(ctx.client.id, "group.change", f"{org}/{name}", "ok", added=add, removed=remove)
        return {"org": org, "name": name, "members": repo.members(ctx.tx, gid)}

    def delete_group(self, ctx: Ctx, org: str, name: str) -> dict[str, Any]:
        _org_id, gid = self._group(ctx, org, name)
        if gid is None:
            raise NotFound(f"no group {name} in {org}")
        repo.delete_group(ctx.tx, gid, _org_id, name)
        ctx.audit.append(ctx.client.id, "group.delete", f"{org}/{name}", "ok")
        return {"org": org, "name": name, "deleted": True}
