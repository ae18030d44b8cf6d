"""The token routes (``auth/token/...`` and the signed login): who may issue, look up, renew and
revoke which token, as Vault decides it -- a route's capability from the caller's policies, and
``sudo`` on top for the accessor listing and revoke-orphan.  A token is only ever found among the
caller's own client's tokens: another client's token, like one that does not exist or has expired,
is a bad token."""

from __future__ import annotations

from typing import Any

from strongroom.server import vault_rows
from strongroom.server.errors import Refused
from strongroom.server.vault.call import Call
from strongroom.server.vault.errors import Invalid, PermissionDenied
from strongroom.server.vault.openapi import BOOL, INT, OBJ, STR, STRS
from strongroom.server.vault.tokens import token_hash
from strongroom.server.vault_rows import TokenRow

TOKEN_PARAMS = {
    "policies": STRS,
    "ttl": STR,
    "explicit_max_ttl": STR,
    "num_uses": INT,
    "renewable": BOOL,
    "display_name": STR,
    "meta": OBJ,
    "no_default_policy": BOOL,
    "period": STR,
    "type": STR,
    "no_parent": BOOL,
    "id": STR,
    "role_name": STR,
    "entity_alias": STR,
}


def register(add: Any) -> None:
    add("POST", "auth/strongroom/login", _login, None, signed=True, body=TOKEN_PARAMS)
    add("POST", "auth/token/create", _create, "update", body=TOKEN_PARAMS)
    add("GET", "auth/token/lookup-self", _lookup_self, "read")
    add("POST", "auth/token/lookup-self", _lookup_self, "read")
    add("POST", "auth/token/renew-self", _renew_self, "update", body={"increment": STR})
    add("POST", "auth/token/revoke-self", _revoke_self, "update")
    add("POST", "auth/token/lookup", _lookup, "update", body={"token": STR})
    add("POST", "auth/token/lookup-accessor", _lookup_accessor, "update", body={"accessor": STR})
    add("POST", "auth/token/renew", _renew, "update", body={"token": STR, "increment": STR})
    add("POST", "auth/token/revoke", _revoke, "update", body={"token": STR})
    add("POST", "auth/token/revoke-accessor", _revoke_accessor, "update", body={"accessor": STR})
    add("POST", "auth/token/revoke-orphan", _revoke_orphan, "update", body={"token": STR})
    add("LIST", "auth/token/accessors", _accessors, "list")


# -- the caller's own token ---------------------------------------------------------------------
def _login(c: Call) -> None:
    token, row = c.tokens.issue(c.ctx.tx, c.ctx.client, c.body)
    c.ctx.audit.append(c.ctx.client.id, "vault.login", c.path, "ok", accessor=row.accessor, ttl=c.tokens.ttl(row))
    c.auth = c.tokens.auth_block(token, row)


def _create(c: Call) -> None:
    if c.body.get("no_parent") or c.body.get("orphan"):
        raise Invalid("orphan tokens are not supported: a token is always made by its client's login or another token")
    if c.body.get("period") and not (c.caller.acl.root or c.caller.acl.allows(c.path, "sudo")):
        raise Invalid("root or sudo privileges required to create periodic token")
    token, row = c.tokens.issue(c.ctx.tx, c.ctx.client, c.body, parent=c.caller)
    c.ctx.audit.append(c.ctx.client.id, "vault.token.create", c.path, "ok", accessor=row.accessor, parent=c.caller.token.accessor)
    c.auth = c.tokens.auth_block(token, row)


def _origin(row: TokenRow) -> str:
    return "auth/strongroom/login" if row.parent is None else "auth/token/create"


def _lookup_self(c: Call) -> dict[str, Any]:
    c.ctx.audit.append(c.ctx.client.id, "vault.token.lookup-self", c.path, "ok", accessor=c.caller.token.accessor)
    fresh = vault_rows.token_by_accessor(c.ctx.tx, c.caller.token.accessor) or c.caller.token
    return c.tokens.lookup(c.token, fresh, _origin(fresh))


def _renew_self(c: Call) -> None:
    row = c.tokens.renew(c.ctx.tx, c.caller.token, c.body.get("increment"))
    c.ctx.audit.append(c.ctx.client.id, "vault.token.renew-self", c.path, "ok", accessor=row.accessor)
    c.auth = c.tokens.auth_block(c.token, row)


def _revoke_self(c: Call) -> None:
    vault_rows.revoke_token_tree(c.ctx.tx, c.caller.token.accessor)
    c.ctx.audit.append(c.ctx.client.id, "vault.token.revoke-self", c.path, "ok", accessor=c.caller.token.accessor)


# -- another token of the same client ------------------------------------------------------------
def _text(c: Call, name: str, missing: str) -> str:
    value = c.body.get(name)
    if value is None or value == "":
        raise Invalid(missing)
    if not isinstance(value, str) or len(value) > 512:
        raise Invalid(f"{name} must be a string")
    return value


def own_by_token(c: Call, token: str) -> TokenRow | None:
    """The caller's client's live token ``token``, or None (unknown, expired or another client's)."""
    found = vault_rows.token_and_client(c.ctx.tx, token_hash(token))
    row = found[0] if found is not None else None
    return row if row is not None and _live_and_own(c, row) else None


def own_by_accessor(c: Call, accessor: str) -> TokenRow | None:
    row = vault_rows.token_by_accessor(c.ctx.tx, accessor)
    return row if row is not None and _live_and_own(c, row) else None


def _live_and_own(c: Call, row: TokenRow) -> bool:
    return row.client_id == c.ctx.client.id and (row.expires is None or row.expires > c.tokens.clock())


def _lookup(c: Call) -> dict[str, Any]:
    token = c.body.get("token") or c.token  # no token in the body: the caller's own, as Vault
    if not isinstance(token, str):
        raise Invalid("token must be a string")
    row = own_by_token(c, token)
    if row is None:
        c.ctx.audit.append(c.ctx.client.id, "vault.token.lookup", c.path, "denied", reason="bad token")
        e = PermissionDenied()
        e.message = "bad token"
        raise Refused(e)
    c.ctx.audit.append(c.ctx.client.id, "vault.token.lookup", c.path, "ok", accessor=row.accessor)
    return c.tokens.lookup(token, row, _origin(row))


def _lookup_accessor(c: Call) -> dict[str, Any]:
    accessor = _text(c, "accessor", "missing accessor")
    row = own_by_accessor(c, accessor)
    if row is None:
        c.ctx.audit.append(c.ctx.client.id, "vault.token.lookup-accessor", c.path, "denied", reason="invalid accessor")
        raise Refused(Invalid("invalid accessor"))
    c.ctx.audit.append(c.ctx.client.id, "vault.token.lookup-accessor", c.path, "ok", accessor=row.accessor)
    return {**c.tokens.lookup("", row, _origin(row)), "id": ""}  # by accessor: never the token itself


def _renew(c: Call) -> None:
    token = _text(c, "token", "missing token ID")
    row = own_by_token(c, token)
    if row is None:
        c.ctx.audit.append(c.ctx.client.id, "vault.token.renew", c.path, "denied", reason="token not found")
        raise Refused(Invalid("token not found"))
    row = c.tokens.renew(c.ctx.tx, row, c.body.get("increment"))
    c.ctx.audit.append(c.ctx.client.id, "vault.token.renew", c.path, "ok", accessor=row.accessor)
    c.auth = c.tokens.auth_block(token, row)


def _revoke(c: Call) -> None:
    token = _text(c, "token", "missing token ID")
    row = own_by_token(c, token)
    if row is not None:  # an unknown token is "revoked" all the same (204), as Vault answers
        vault_rows.revoke_token_tree(c.ctx.tx, row.accessor)
    c.ctx.audit.append(c.ctx.client.id, "vault.token.revoke", c.path, "ok", accessor=row.accessor if row else "")


def _revoke_accessor(c: Call) -> None:
    accessor = _text(c, "accessor", "missing accessor")
    row = own_by_accessor(c, accessor)
    if row is None:
        c.warnings = ["No token found with this accessor"]
    else:
        vault_rows.revoke_token_tree(c.ctx.tx, row.accessor)
    c.ctx.audit.append(c.ctx.client.id, "vault.token.revoke-accessor", c.path, "ok", accessor=row.accessor if row else "")
    c.status = 200


def _revoke_orphan(c: Call) -> None:
    c.require("sudo")
    token = _text(c, "token", "missing token ID")
    row = own_by_token(c, token)
    if row is None:
        c.ctx.audit.append(c.ctx.client.id, "vault.token.revoke-orphan", c.path, "denied", reason="not found")
        raise Refused(Invalid("token to revoke not found"))
    vault_rows.orphan_children(c.ctx.tx, row.accessor)  # its children live on, without a parent
    vault_rows.revoke_token_tree(c.ctx.tx, row.accessor)
    c.ctx.audit.append(c.ctx.client.id, "vault.token.revoke-orphan", c.path, "ok", accessor=row.accessor)


def _accessors(c: Call) -> dict[str, Any]:
    c.require("sudo")
    now = c.tokens.clock()
    keys = vault_rows.live_token_accessors(c.ctx.tx, c.ctx.client.id, now)
    c.ctx.audit.append(c.ctx.client.id, "vault.token.accessors", c.path, "ok", count=len(keys))
    return {"keys": keys}
