"""The Vault-compatible HTTP surface: Vault's paths, its LIST verb, its token headers, its
envelopes and error shapes.  Requests to any other path go on to the deposit API.

Two halves, as the deposit API's hot routes: ``VaultFront`` (ASGI, in each worker) reads the
request, parses its JSON, finds its route, checks a login's signature and answers the routes that
need no token; ``VaultEngine`` (in the writer process, server/writer.py) runs the rest, each as
one action of the writer's group commit: the token checked, the capability decided by its
policies, the work done and the audit entry appended in the transaction that commits before the
answer leaves.  Between them travel messages (messages.py): the request as ``VaultRequest`` (the
route found by the worker, as its place in the table both processes build alike) and the outcome
as ``VaultOutcome``."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from strongroom.server import numbers
from strongroom.server.asgi import ASGIApp, Receive, Scope, Send
from strongroom.server.audit import AuditWriter
from strongroom.server.ctx import Ctx
from strongroom.server.errors import ApiError
from strongroom.server.messages import Checked, VaultOutcome, VaultRequest
from strongroom.server.request import VAULT_PREFIXES, raw_path, read_body, signed_request
from strongroom.server.service import Service
from strongroom.server.storage import Tx
from strongroom.server.vault import durations, jsonshape, routes
from strongroom.server.vault import policy as pol
from strongroom.server.vault.call import Call, Handler, Plain, VaultRoute
from strongroom.server.vault.errors import Invalid, Missing, PermissionDenied, errors_of
from strongroom.server.vault.tokens import Caller, Tokens, token_hash
from strongroom.server.vault_rows import TokenRow

log = logging.getLogger("strongroom.server.vault")

PREFIXES = VAULT_PREFIXES
# Runs a request's action where the group commit is (the writer process); None for an unsigned one.
Runner = Callable[[str, VaultRequest, Checked | None], Awaitable[VaultOutcome]]


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


class VaultEngine:
    """The route table and what runs each route inside a transaction."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.tokens = Tokens(clock=lambda: service.clock())
        self.routes: list[VaultRoute] = []
        self._combined: tuple[re.Pattern[str], dict[str, tuple[list[tuple[str, str]], dict[str, int]]]] | None = None
        routes.register(self.add, service, self.routes)

    def add(self, method: str, path: str, handler: Handler, capability: str | None, **kw: Any) -> None:
        """``path`` with ``{name}`` for one segment and ``{path*}`` for the rest (may be empty)."""
        self.routes.append(VaultRoute(method, re.compile(f"^{_regex(path)}$"), handler, capability, template=path, **kw))
        self._combined = None

    def match(self, method: str, path: str) -> tuple[int, dict[str, str]]:
        """The route's place in the table and its captured parts: the first route in table
        order whose pattern takes the path and whose method is the request's (405 when only
        other methods' routes take it).  One regular expression of every distinct pattern finds
        the first pattern that takes the path; only when that pattern has no route for the
        method does the table get walked in order."""
        if self._combined is None:
            self._combined = self._combine()
        combined, groups = self._combined
        m = combined.match(path)
        if m is not None:
            names, methods = groups[m.lastgroup or ""]
            index = methods.get(method)
            if index is not None:
                return index, {k: v for k, g in names if (v := m.group(g)) is not None}
        allowed = False
        for i, route in enumerate(self.routes):
            found = route.pattern.match(path)
            if found is None:
                continue
            if route.method == method:
                return i, {k: v for k, v in found.groupdict().items() if v is not None}
            allowed = True
        if allowed:
            raise MethodNotAllowed()
        if path.startswith(_BACKENDS_SAYING_UNSUPPORTED):
            raise UnsupportedPath()
        raise Missing()

    def _combine(self) -> tuple[re.Pattern[str], dict[str, tuple[list[tuple[str, str]], dict[str, int]]]]:
        by_template: dict[str, tuple[str, list[tuple[str, str]], dict[str, int]]] = {}
        parts = []
        for i, route in enumerate(self.routes):
            if route.template not in by_template:
                g = f"r{len(by_template)}"
                names = re.findall(r"\{(\w+)\*?\}", route.template)
                by_template[route.template] = (g, [(n, f"{g}_{n}") for n in names], {})
                parts.append(f"(?P<{g}>{_regex(route.template, g + '_')})")
            by_template[route.template][2].setdefault(route.method, i)  # the first in table order
        groups = {g: (names, methods) for g, names, methods in by_template.values()}
        return re.compile("^(?:" + "|".join(parts) + ")$"), groups

    def action(self, raw_path: str, req: VaultRequest, checked: Checked | None) -> Callable[[Tx, AuditWriter], VaultOutcome]:
        """The group-commit action for one request (``checked``: a login's checked signature)."""
        if not 0 <= req.route < len(self.routes):
            raise ValueError("no such route")  # both processes build one table; answered 500, never run
        route = self.routes[req.route]
        path, token = req.path, req.token

        def act(ctx: Ctx, caller: Caller) -> VaultOutcome:
            call = Call(ctx, caller, path, req.params, req.query, req.body, token, self.tokens, self.service)
            if route.capability is not None:
                call.require(route.capability)
            before = ctx.audit.seq
            out = route.handler(call)
            if ctx.audit.seq == before:  # every route that answers leaves an entry, reads included
                ctx.audit.append(ctx.client.id, "vault." + route.method.lower(), path, "ok", route=route.template)
            if out is None and call.auth is None and not call.warnings:
                return VaultOutcome(204, None)
            warnings = call.warnings
            if route.body is not None and (ignored := sorted(k for k in req.body if k not in route.body)):
                # what the route does not read is named, never silently dropped (Vault's warning)
                warnings = [*(warnings or []), f"Endpoint ignored these unrecognized parameters: [{' '.join(ignored)}]"]
            return VaultOutcome(call.status, out, call.auth, warnings, call.flatten)

        if route.signed:
            if checked is None:
                raise PermissionDenied()
            return self.service.auth.signed_action(raw_path, checked, lambda ctx: act(ctx, _self_caller(ctx)))

        def run(tx: Tx, aw: AuditWriter) -> VaultOutcome:
            caller = self.tokens.caller(tx, aw, req.token_digest if token else None, path)
            return act(Ctx(tx, caller.client, aw), caller)

        return run


class VaultFront:
    """ASGI: Vault's paths here, every other path to ``app``; ``run`` carries each request's
    action to the group commit (the writer process)."""

    def __init__(self, app: ASGIApp, service: Service, limit: int, run: Runner) -> None:
        self.app = app
        self.service = service
        self.limit = limit
        self.run = run
        self.engine = VaultEngine(service)  # for matching here; the writer's own runs the actions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIXES):
            await self.app(scope, receive, send)
            return
        try:
            answer = await self._answer(scope, receive)
        except ApiError as e:
            answer = Answer(e.status, error_body(["Vault is sealed"] if e.code == "sealed" else errors_of(e)))
        except Exception as e:  # noqa: BLE001 - the type only: a message could carry request content
            log.error("internal error in the Vault API: %s", type(e).__name__)
            answer = Answer(500, error_body(["internal error; see the server log"]))
        headers = [(b"cache-control", b"no-store"), *answer.headers]
        if answer.body is not None:
            headers.append((b"content-type", b"application/json"))
            headers.append((b"content-length", str(len(answer.body)).encode()))
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": answer.body or b""})

    async def _answer(self, scope: Scope, receive: Receive) -> Answer:
        method = scope["method"]
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        if method == "GET" and query.get("list"):
            listing = _GO_BOOL.get(query["list"])  # Go's strconv.ParseBool, as Vault reads it
            if listing is None:
                raise Invalid("")  # Vault's answer: 400 with no message
            if listing:
                method = "LIST"
        elif method == "PUT":
            method = "POST"
        elif method == "HEAD":
            method = "GET"
        raw = await read_body(scope, receive, self.limit)
        body: dict[str, Any] = {}
        if raw.strip():
            try:
                parsed = json.loads(raw)
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise Invalid("failed to parse JSON input: the body is not valid JSON (or nested too deeply)") from None
            if parsed is None:
                parsed = {}  # `bao write -f` sends null for "no data"
            jsonshape.check(parsed)
            if not isinstance(parsed, dict):
                raise Invalid("failed to parse JSON input: the body must be a JSON object")
            body = {k: v for k, v in parsed.items() if v is not None}  # null is "not given", as Vault reads fields
        path = scope["path"][len("/v1/") :]
        if method == "LIST" and path.endswith("/"):
            path = path[:-1]  # a listing's path is the same with or without its trailing slash
        headers = dict(scope.get("headers", []))
        namespace = headers.get(b"x-vault-namespace", b"").decode("latin-1").strip()
        if namespace:
            _in_namespace(path, namespace.strip("/") in ("", "root"))  # only the root namespace exists here
        wrap = headers.get(b"x-vault-wrap-ttl")
        if wrap is not None and _wrap_ttl(wrap.decode("latin-1")):
            raise Invalid("response wrapping is not supported by this server: ask without X-Vault-Wrap-TTL")
        index, params = self.engine.match(method, path)
        route = self.engine.routes[index]
        if route.body is not None and body:
            body = _typed(body, route.body)
        # a secret's own values may hold any JSON string; nothing else that is stored or audited may
        kv_data = method in ("POST", "PATCH") and route.template.endswith("/data/{path*}")
        jsonshape.no_nul(path, query, {k: v for k, v in body.items() if not (kv_data and k == "data")})
        token = headers.get(b"x-vault-token", b"").decode("latin-1").strip()
        if not token:
            bearer = headers.get(b"authorization", b"").decode("latin-1")
            if bearer[:7].lower() == "bearer ":
                token = bearer[7:].strip()
        if not route.authenticated:
            status, data = route.handler(Plain(path, params, query, body, self.service))
            return Answer(status, json.dumps(data).encode())
        if len(token) > 512:
            raise PermissionDenied()
        checked = None
        if route.signed:  # the signature is CPU work that needs no lock: checked here
            checked = self.service.auth.verify_signature(signed_request(scope, raw))
        req = VaultRequest(index, params, path, query, body, token, token_hash(token))
        outcome = await self.run(raw_path(scope), req, checked)
        if outcome.status == 204:
            return Answer(204, None)
        data = outcome.data
        out = envelope(data, outcome.auth, outcome.warnings)
        if outcome.flatten and isinstance(data, dict):
            out = {**data, **out}
        return Answer(outcome.status, json.dumps(out).encode())


_GO_BOOL = {v: True for v in ("1", "t", "T", "TRUE", "true", "True")}
_GO_BOOL |= {v: False for v in ("0", "f", "F", "FALSE", "false", "False")}
# What a request naming a namespace may reach (OpenBao's answers for one that does not exist).
_ANY_NAMESPACE = frozenset({"sys/seal-status", "sys/leader"})
_ROOT_ONLY = frozenset({"sys/health", "sys/init"})


# Mounts whose backend words a path it has no route for (OpenBao's text; the KV mount answers bare).
_BACKENDS_SAYING_UNSUPPORTED = ("sys/", "transit/", "auth/token/")


class UnsupportedPath(ApiError):
    status, code = 404, "not_found"

    def __init__(self) -> None:
        super().__init__("1 error occurred:\n\t* unsupported path\n\n")


class NamespaceMissing(ApiError):
    status, code = 404, "not_found"


def _typed(body: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``body`` with the integers and booleans its route takes read from strings, as Vault's
    field types read them ("3", "true", "t", "1"); anything else is left for the handler to refuse."""
    out = body
    for name, value in body.items():
        kind = schema.get(name, {}).get("type") if isinstance(value, str) else None
        if kind == "integer" and len(value) <= 19 and numbers.is_digits(value[1:] if value[:1] in "+-" else value):
            out = {**out, name: int(value)}
        elif kind == "boolean" and value in _GO_BOOL:
            out = {**out, name: _GO_BOOL[value]}
    return out


def _wrap_ttl(value: str) -> int:
    """The wrapping TTL a request asks for (0: none), read as Vault reads it."""
    try:
        return durations.seconds(value, "X-Vault-Wrap-TTL")
    except Invalid as e:
        raise Invalid(f"error parsing X-Vault-Wrap-TTL header: {e.message}") from None


def _in_namespace(path: str, root: bool) -> None:
    """A request that names a namespace: health and init refuse any (the root named included, as
    OpenBao does), and every other path but the seal's and the leader's refuses one that is not
    the root."""
    if path in _ROOT_ONLY:
        raise Invalid("operation unavailable in namespaces")
    if not root and path not in _ANY_NAMESPACE:
        raise NamespaceMissing("namespace not found")


def _regex(template: str, prefix: str = "") -> str:
    regex = re.escape(template).replace(r"\{path\*\}", f"(?P<{prefix}path>.*)")
    return re.sub(r"\\\{(\w+)\\\}", lambda m: f"(?P<{prefix}{m.group(1)}>[^/]+)", regex)


def _self_caller(ctx: Ctx) -> Caller:
    """A signed login acts as the client itself: everything its own credential allows."""
    row = TokenRow("", ctx.client.id, None, '["root"]', "signed", "{}", 0.0, None, 0, None, 0, 0)
    return Caller(ctx.client, row, pol.Acl([], root=True))
