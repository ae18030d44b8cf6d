"""Vault tokens: issued to a registered client (by its signed login) or made from another token;
stored as hashes; each request's token is checked inside its transaction (expiry, uses, the
client's status) and turned into the ACL its policies give.

A token acts as its client: every deposit, policy check and audit entry is the client's, and a
client that is disabled or revoked takes its tokens down with it (revocation deletes them)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from strongroom.crypto.identity import b64u
from strongroom.server import vault_rows
from strongroom.server.audit import AuditWriter
from strongroom.server.errors import Refused, TooMany
from strongroom.server.repository import ClientRow
from strongroom.server.storage import Tx
from strongroom.server.vault import durations
from strongroom.server.vault import policy as pol
from strongroom.server.vault.errors import Invalid, PermissionDenied
from strongroom.server.vault_rows import TokenRow

PREFIX = "sr."
DEFAULT_TTL = 768 * 3600  # Vault's default and maximum token TTL
MAX_TTL = 768 * 3600
MAX_TOKENS_PER_CLIENT = 10_000
MAX_POLICIES = 64
MAX_META = 64


def token_hash(token: str) -> bytes:
    # Tokens carry 256 random bits, so a plain hash keeps them out of the database.
    return hashlib.sha256(b"strongroom vault token v1\0" + token.encode("utf-8", "replace")).digest()


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    frac = f"{t % 1:.9f}"[1:]
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + frac + "Z"


@dataclass
class Caller:
    """The client a request's token acts for, the token, and what its policies allow."""

    client: ClientRow
    token: TokenRow
    acl: pol.Acl

    @property
    def policies(self) -> list[str]:
        return list(json.loads(self.token.policies))


class Tokens:
    def __init__(self, clock: Any = time.time) -> None:
        self.clock = clock
        self._parsed: OrderedDict[str, tuple[pol.Rule, ...]] = OrderedDict()  # policy text -> rules

    # -- checking a request's token ------------------------------------------------------------
    def caller(self, tx: Tx, aw: AuditWriter, digest: bytes | None, path: str) -> Caller:
        """The caller behind the token whose ``token_hash`` is ``digest`` (None: no token), its use
        counted; a refusal is audited, then PermissionDenied."""
        found = vault_rows.token_and_client(tx, digest) if digest else None
        row, client = found if found is not None else (None, None)
        now = self.clock()
        reason = None
        if row is None:
            reason = "unknown token"
        elif row.expires is not None and now >= row.expires:
            reason = "token expired"
        elif row.parent is not None and not self._parent_alive(tx, row.parent, now):
            reason = "parent token expired"
        if row is not None and reason is None and (client is None or client.status != "active"):
            reason = f"client is {client.status if client else 'gone'}"
        if reason is not None or row is None or client is None:
            aw.append(row.client_id if row else "anonymous", "vault.auth", path, "denied", reason=reason)
            raise Refused(PermissionDenied())
        if row.uses_left > 0:
            if row.uses_left == 1:
                vault_rows.revoke_token_tree(tx, row.accessor)  # its last use: gone after this request
                row = dataclasses.replace(row, uses_left=-1)  # what Vault reports of a token in its last use
            else:
                vault_rows.use_token(tx, row.accessor)
        return Caller(client, row, self.acl(tx, json.loads(row.policies)))

    def _parent_alive(self, tx: Tx, accessor: str | None, now: float) -> bool:
        """A child dies with its parent: when the parent is revoked (its row is gone with its
        children) or expires (checked here, up the chain)."""
        for _depth in range(64):
            if accessor is None:
                return True
            parent = vault_rows.token_by_accessor(tx, accessor)
            if parent is None or parent.expires is not None and now >= parent.expires:
                return False
            accessor = parent.parent
        return False

    def acl(self, tx: Tx, names: list[str]) -> pol.Acl:
        if "root" in names:
            return _ROOT
        bodies = vault_rows.policy_bodies(tx, [n for n in names if n not in pol.RESERVED])
        rules = [pol.DEFAULT_RULES] if "default" in names else []
        for body in bodies.values():
            rules.append(self._rules(body))
        return pol.Acl(rules)

    def _rules(self, body: str) -> tuple[pol.Rule, ...]:
        got = self._parsed.get(body)
        if got is None:
            got = pol.parse(body)  # stored policies parsed when written; this cannot fail on them
            self._parsed[body] = got
            if len(self._parsed) > 256:
                self._parsed.popitem(last=False)
        return got

    # -- issuing -------------------------------------------------------------------------------
    def issue(self, tx: Tx, client: ClientRow, params: dict[str, Any], parent: Caller | None = None) -> tuple[str, TokenRow]:
        """A new token for ``client`` from Vault's token-creation parameters; (token, its row)."""
        policies = _names(params.get("policies"), "policies")
        if parent is not None and not policies:
            policies = list(parent.policies)  # as Vault: a child without policies gets its parent's
        if not params.get("no_default_policy") and "default" not in policies and "root" not in policies:
            policies.append("default")
        if parent is not None and "root" not in parent.policies:
            wider = set(policies) - set(parent.policies) - {"default"}
            if wider:
                raise Invalid(f"child policies must be subset of parent: {sorted(wider)[0]!r} is not the parent's")
        unknown = [n for n in policies if n not in pol.RESERVED and vault_rows.policy_body(tx, n) is None]
        if unknown:
            raise Invalid(f"no such policy: {unknown[0]!r}")
        kind = params.get("type", "service")
        if kind == "batch":
            raise Invalid("batch tokens are not supported: create a service token (the default)")
        if kind not in ("service", "default", ""):
            raise Invalid("invalid 'token_type' value")
        for unsupported, what in (("id", "custom token IDs"), ("role_name", "token roles"), ("entity_alias", "entity aliases")):
            if params.get(unsupported):
                raise Invalid(f"{what} are not supported")
        now = self.clock()
        period = durations.seconds(params.get("period", ""), "period")
        ttl = period or durations.seconds(params.get("ttl", ""), "ttl") or DEFAULT_TTL
        explicit = durations.seconds(params.get("explicit_max_ttl", ""), "explicit_max_ttl")
        # a periodic token renews for its period again and again: no maximum unless one is given
        max_expires: float | None = now + min(explicit or MAX_TTL, MAX_TTL) if explicit or not period else None
        expires = now + min(ttl, MAX_TTL) if max_expires is None else min(now + min(ttl, MAX_TTL), max_expires)
        uses = params.get("num_uses", 0)
        if not isinstance(uses, int) or isinstance(uses, bool) or not 0 <= uses <= 2**31 - 1:
            raise Invalid("num_uses must be a non-negative integer")
        renewable = params.get("renewable", True)
        if not isinstance(renewable, bool):
            raise Invalid("renewable must be true or false")
        display = params.get("display_name", "token")
        if not isinstance(display, str) or len(display) > 100:
            raise Invalid("display_name must be a string of at most 100 characters")
        meta = params.get("meta") or {}
        if (
            not isinstance(meta, dict)
            or len(meta) > MAX_META
            or not all(isinstance(k, str) and isinstance(v, str) and len(k) + len(v) <= 512 for k, v in meta.items())
        ):
            raise Invalid(f"meta must be an object of at most {MAX_META} short strings")
        if vault_rows.count_tokens(tx, client.id) >= MAX_TOKENS_PER_CLIENT:
            vault_rows.forget_expired_tokens(tx, now)
            if vault_rows.count_tokens(tx, client.id) >= MAX_TOKENS_PER_CLIENT:
                raise TooMany(f"this client holds {MAX_TOKENS_PER_CLIENT} tokens; revoke some first")
        token = PREFIX + b64u(os.urandom(32))
        row = TokenRow(
            accessor=b64u(os.urandom(18)),
            client_id=client.id,
            parent=parent.token.accessor if parent is not None else None,
            policies=json.dumps(sorted(set(policies))),
            display_name="token" if display == "token" else f"token-{display}",
            meta=json.dumps(meta, sort_keys=True),
            created=now,
            expires=expires,
            period=min(ttl, MAX_TTL),
            max_expires=max_expires,
            uses_left=uses,
            renewable=int(renewable),
            explicit_max_ttl=min(explicit, MAX_TTL),
        )
        vault_rows.insert_token(tx, row, token_hash(token))
        return token, row

    def renew(self, tx: Tx, t: TokenRow, increment: object) -> TokenRow:
        if not t.renewable:
            raise Invalid("token is not renewable")
        now = self.clock()
        if t.max_expires is None:  # periodic: each renewal is one period, whatever the increment
            step = t.period
        else:
            step = durations.seconds(increment if increment is not None else "", "increment") or t.period
        expires = min(now + step, t.max_expires if t.max_expires is not None else now + step)
        vault_rows.set_token_expiry(tx, t.accessor, expires)
        return TokenRow(**{**t.__dict__, "expires": expires})

    # -- answers -------------------------------------------------------------------------------
    def auth_block(self, token: str, row: TokenRow) -> dict[str, Any]:
        """The ``auth`` member of a login, create or renew answer."""
        policies = json.loads(row.policies)
        return {
            "client_token": token,
            "accessor": row.accessor,
            "policies": policies,
            "token_policies": policies,
            "metadata": json.loads(row.meta) or None,
            "lease_duration": self.ttl(row),
            "renewable": bool(row.renewable),
            "entity_id": "",
            "token_type": "service",
            "orphan": row.parent is None,
            "mfa_requirement": None,
            "num_uses": row.uses_left,
        }

    def ttl(self, row: TokenRow) -> int:
        return 0 if row.expires is None else max(0, round(row.expires - self.clock()))  # 600 s is 600, not 599

    def lookup(self, token: str, row: TokenRow, path: str) -> dict[str, Any]:
        """A token lookup's data (``token``: the token itself, or "" when looked up by accessor)."""
        out = {
            "accessor": row.accessor,
            "creation_time": int(row.created),
            "creation_ttl": int(row.period),
            "display_name": row.display_name,
            "entity_id": "",
            "expire_time": iso(row.expires),
            "explicit_max_ttl": row.explicit_max_ttl,
            "id": token,
            "issue_time": iso(row.created),
            "meta": json.loads(row.meta) or None,
            "num_uses": row.uses_left,
            "orphan": row.parent is None,
            "path": path,
            "policies": json.loads(row.policies),
            "renewable": bool(row.renewable),
            "ttl": self.ttl(row),
            "type": "service",
        }
        if row.max_expires is None:  # periodic
            out["period"] = int(row.period)
        return out


_ROOT = pol.Acl([], root=True)


def _names(value: object, what: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and pol.NAME_RE.match(v) for v in value):
        raise Invalid(f"{what} must be a list of policy names")
    if len(value) > MAX_POLICIES:
        raise Invalid(f"at most {MAX_POLICIES} {what}")
    return list(dict.fromkeys(value))
