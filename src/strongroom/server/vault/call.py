"""A Vault request as its handler sees it (``Call``, inside its transaction; ``Plain`` for the
routes that take no token), and the route table's entry (``VaultRoute``).  Apart from http.py
so that the table's modules (routes.py, transit.py, openapi.py) and the engine that runs them
import these without importing each other."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strongroom.server.ctx import Ctx
from strongroom.server.errors import Refused
from strongroom.server.service import Service
from strongroom.server.vault.errors import PermissionDenied
from strongroom.server.vault.tokens import Caller, Tokens


@dataclass
class Call:
    """One request as a handler sees it, inside its transaction."""

    ctx: Ctx
    caller: Caller
    path: str  # the logical path: "secret/data/app"
    params: dict[str, str]  # the route's captured parts
    query: dict[str, str]
    body: dict[str, Any]
    token: str
    tokens: Tokens
    service: Service
    status: int = 200
    auth: dict[str, Any] | None = None
    warnings: list[str] | None = None
    flatten: bool = False  # some sys routes also put data's members at the top level (Vault's legacy form)
    memo: dict[str, Any] = field(default_factory=dict)  # what a handler read once and needs again

    def require(self, capability: str, path: str | None = None) -> None:
        """Refuse (audited, then 403 "permission denied") unless the token's policies allow it."""
        where = self.path if path is None else path
        if not self.caller.acl.allows(where, capability):
            self.ctx.audit.append(
                self.ctx.client.id, "vault.acl", where, "denied", capability=capability, accessor=self.caller.token.accessor
            )
            raise Refused(PermissionDenied())


@dataclass
class Plain:
    """A request to a route that takes no token (sys/health, sys/seal-status)."""

    path: str
    params: dict[str, str]
    query: dict[str, str]
    body: dict[str, Any]
    service: Service


Handler = Callable[[Any], Any]  # Call -> data, or Plain -> (status, body)


@dataclass(frozen=True)
class VaultRoute:
    method: str  # GET, LIST (also GET with ?list=true), POST (also PUT), PATCH, DELETE
    pattern: re.Pattern[str]
    handler: Handler
    capability: str | None  # checked before the handler; None: the handler decides
    authenticated: bool = True
    signed: bool = False  # authenticated by the client's request signature, not a token
    template: str = ""  # the path as written in the table, for the OpenAPI description
    body: dict[str, Any] | None = None  # the body's fields as JSON Schema (openapi.py; not enforced here)
