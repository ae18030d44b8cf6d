"""The Vault-compatible HTTP surface in plain ASGI: Vault's paths, its LIST verb, its token
headers, its envelopes and error shapes.  Requests to any other path go on to the deposit API.

Each route names the capability it needs on its logical path (the path after ``/v1/``); the
handler runs inside one group-commit action (committer.py), where the token is checked, the
capability decided by the token's policies, the work done and the audit entry appended, all in
the transaction that commits before the answer leaves."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from strongroom.server.audit import AuditWriter
from strongroom.server.errors import ApiError, Refused, Sealed, TooLarge, Unavailable
from strongroom.server.service import Ctx, Service, SignedRequest
from strongroom.server.storage import Tx
from strongroom.server.vault import policy as pol
from strongroom.server.vault.errors import Invalid, Missing, PermissionDenied, errors_of
from strongroom.server.vault.tokens import Caller, Tokens

log = logging.getLogger("strongroom.server.vault")

PREFIXES = ("/v1/sys/", "/v1/secret/", "/v1/transit/", "/v1/auth/token/", "/v1/auth/strongroom/")
REQUEST_TIMEOUT = 30.0
VERSION = "strongroom-1 (Vault API subset)"


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


@dataclass
class Answer:
    status: int
    body: bytes | None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def envelope(data: Any, auth: dict[str, Any] | None = None, warnings: list[str] | None = None) -> dict[str, Any]:
    return {
        "request_id": str(uuid.uuid4()),
        "lease_id": "",
        "renewable": False,
        "lease_duration": 0,
        "data": data,
        "wrap_info": None,
        "warnings": warnings,
        "auth": auth,
    }


def error_body(messages: list[str]) -> bytes:
    return json.dumps({"errors": messages}).encode()


class MethodNotAllowed(ApiError):
    status, code = 405, "method_not_allowed"

    def __init__(self) -> None:
        super().__init__("unsupported operation")


class VaultFront:
    """ASGI: Vault's paths here, every other path to ``app``."""

    def __init__(self, app: ASGIApp, service: Service, limit: int) -> None:
        self.app = app
        self.service = service
        self.limit = limit
        self.tokens = Tokens(clock=lambda: service.clock())
        self.routes: list[VaultRoute] = []
        from strongroom.server.vault import routes  # the table refers back to Call and envelope

        routes.register(self)

    def add(self, method: str, path: str, handler: Handler, capability: str | None, **kw: Any) -> None:
        """``path`` with ``{name}`` for one segment and ``{path*}`` for the rest (may be empty)."""
        regex = re.escape(path).replace(r"\{path\*\}", r"(?P<path>.*)")
        regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", regex)
        self.routes.append(VaultRoute(method, re.compile(f"^{regex}$"), handler, capability, template=path, **kw))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIXES):
            await self.app(scope, receive, send)
            return
        try:
            answer = await self._answer(scope, receive)
        except ApiError as e:
            status = e.status
            answer = Answer(status, error_body(["Vault is sealed"] if isinstance(e, Sealed) else errors_of(e)))
        except Exception as e:  # noqa: BLE001 - the type only: a message could carry request content
            log.error("internal error in the Vault API: %s", type(e).__name__)
            answer = Answer(500, error_body(["internal error; see the server log"]))
        headers = [(b"cache-control", b"no-store"), *answer.headers]
        if answer.body is not None:
            headers.append((b"content-type", b"application/json"))
            headers.append((b"content-length", str(len(answer.body)).encode()))
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": answer.body or b""})

    async def _body(self, receive: Receive) -> bytes:
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                raise TooLarge(f"request body over {self.limit} bytes")
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        return b"".join(chunks)

    async def _answer(self, scope: Scope, receive: Receive) -> Answer:
        method = scope["method"]
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        if method == "LIST" or method == "GET" and query.get("list") == "true":
            method = "LIST"
        elif method == "PUT":
            method = "POST"
        elif method == "HEAD":
            method = "GET"
        raw = await self._body(receive)
        body: dict[str, Any] = {}
        if raw.strip():
            try:
                parsed = json.loads(raw)
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise Invalid("failed to parse JSON input: the body is not valid JSON (or nested too deeply)") from None
            if parsed is None:
                parsed = {}  # `bao write -f` sends null for "no data"
            if not isinstance(parsed, dict):
                raise Invalid("failed to parse JSON input: the body must be a JSON object")
            body = parsed
        path = scope["path"][len("/v1/") :]
        route, params = self._match(method, path)
        headers = dict(scope.get("headers", []))
        token = headers.get(b"x-vault-token", b"").decode("latin-1").strip()
        if not token:
            bearer = headers.get(b"authorization", b"").decode("latin-1")
            if bearer[:7].lower() == "bearer ":
                token = bearer[7:].strip()
        if not route.authenticated:
            return self._plain(route.handler(self._unauthenticated(path, params, query, body)))
        if len(token) > 512:
            raise PermissionDenied()

        def act(ctx: Ctx, caller: Caller | None) -> Any:
            if caller is None:
                caller = self.tokens.caller(ctx.tx, ctx.audit, token, path)
            call = Call(ctx, caller, path, params, query, body, token, self.tokens, self.service)
            if route.capability is not None:
                call.require(route.capability)
            out = route.handler(call)
            return call, out

        if route.signed:
            req = SignedRequest(
                method=scope["method"],
                raw_path=(scope.get("raw_path") or scope["path"].encode()).decode("latin-1"),
                raw_query=scope.get("query_string", b"").decode("latin-1"),
                body=raw,
                headers={k.decode("latin-1"): v.decode("latin-1") for k, v in headers.items()},
            )
            fut = self.service.signed_future(req, lambda ctx: act(ctx, _self_caller(ctx)))
        else:

            def run(tx: Tx, aw: AuditWriter) -> Any:
                # The token says who the client is; Ctx needs it before act() checks the token.
                caller = self.tokens.caller(tx, aw, token, path)
                return act(Ctx(tx, caller.client, aw), caller)

            fut = self.service.submit(run)
        try:
            call, out = await asyncio.wait_for(asyncio.wrap_future(fut), REQUEST_TIMEOUT)
        except TimeoutError:
            raise Unavailable("the database did not answer in time; retry later") from None
        return self._render(call, out)

    def _match(self, method: str, path: str) -> tuple[VaultRoute, dict[str, str]]:
        allowed = False
        for route in self.routes:
            m = route.pattern.match(path)
            if m is None:
                continue
            if route.method == method:
                return route, {k: v for k, v in m.groupdict().items() if v is not None}
            allowed = True
        if allowed:
            raise MethodNotAllowed()
        raise Missing()

    def _unauthenticated(self, path: str, params: dict[str, str], query: dict[str, str], body: dict[str, Any]) -> Plain:
        return Plain(path, params, query, body, self.service)

    @staticmethod
    def _plain(out: tuple[int, Any]) -> Answer:
        status, data = out
        return Answer(status, json.dumps(data).encode())

    @staticmethod
    def _render(call: Call, out: Any) -> Answer:
        if out is None and call.auth is None:
            return Answer(204, None)
        body = envelope(out, call.auth, call.warnings)
        if call.flatten and isinstance(out, dict):
            body = {**out, **body}
        return Answer(call.status, json.dumps(body).encode())


def _self_caller(ctx: Ctx) -> Caller:
    """A signed login acts as the client itself: everything its own credential allows."""
    from strongroom.server.repository import TokenRow

    row = TokenRow("", ctx.client.id, None, '["root"]', "signed", "{}", 0.0, None, 0, None, 0, 0)
    return Caller(ctx.client, row, pol.Acl([], root=True))
