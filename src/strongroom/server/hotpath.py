"""The hot routes (get a deposit, put a deposit, entropy, registration) answered in plain ASGI.

Profiled under load, FastAPI's request machinery (dependency solving, parameter validation,
response encoding, its middleware stack) took more of the event loop than the handlers' own
work.  Well-formed requests to these routes are answered here, through the same Service calls and
the same JSON errors as the FastAPI routes; anything unusual (another parameter, a malformed
value, a body where none belongs, JSON that does not validate) is passed on untouched to the
FastAPI app, which answers it exactly as before.  Both are built from the route table
(routes.py): paths, statuses, parameter bounds and body models are written there once.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from strongroom.crypto import reqsig
from strongroom.server import routes as r
from strongroom.server.asgi import replay, request_message
from strongroom.server.errors import ApiError, BadRequest, TooLarge
from strongroom.server.identities import secret_hash
from strongroom.server.routes import PassOn
from strongroom.server.service import Service, SignedRequest
from strongroom.server.writerlink import WriterLink

log = logging.getLogger("strongroom.server.api")

DEPOSITS = r.DEPOSIT_GET.path.removesuffix("{name}")  # "/v1/deposits/": the name follows
_AUTH = tuple(h.encode() for h in (reqsig.HEADER_CLIENT, reqsig.HEADER_TIME, reqsig.HEADER_NONCE, reqsig.HEADER_SIG))


def deposit_bytes(data_b64: str, limit: int) -> bytes:
    """A put's content from its JSON body (standard base64), within the server's deposit limit."""
    try:
        data = base64.b64decode(data_b64, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("data must be standard base64") from None
    if len(data) > limit:
        raise TooLarge(f"deposit is larger than the server's limit of {limit} bytes")
    return data


class HotPath:
    def __init__(
        self,
        app: ASGIApp,
        service: Service,
        routes: dict[str, Any],
        error: Callable[[int, str, str], Any],
        link: WriterLink,
    ) -> None:
        self.app = app
        self.service = service
        self.link = link  # the writer process runs every hot route's action
        self.routes = routes  # route template -> the FastAPI route, for the metrics label
        self.error = error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        handler = None
        if path.startswith(DEPOSITS) and "/" not in path[len(DEPOSITS) :] and len(path) > len(DEPOSITS):
            handler = self._get if method == "GET" else self._put if method == "PUT" else None
        elif path == r.ENTROPY.path and method == r.ENTROPY.method:
            handler = self._entropy
        elif path == r.REGISTER.path and method == r.REGISTER.method:
            handler = self._register
        if handler is None:
            await self.app(scope, receive, send)
            return
        body = b""
        if method in ("PUT", "POST"):
            body = await _read_body(receive)
        elif _has_body(scope):
            await self.app(scope, receive, send)
            return
        try:
            await handler(scope, body, send)
        except PassOn:
            await self.app(scope, replay(request_message(body), receive), send)

    def _signed(self, scope: Scope, body: bytes) -> SignedRequest:
        headers: dict[str, str] = {}
        for k, v in scope["headers"]:
            if k in _AUTH:
                headers.setdefault(k.decode(), v.decode("latin-1"))  # the first, as Starlette's headers.get
        return SignedRequest(
            method=scope["method"],
            raw_path=(scope.get("raw_path") or scope["path"].encode()).decode("latin-1"),
            raw_query=scope.get("query_string", b"").decode("latin-1"),
            body=body,
            headers={h.decode(): headers.get(h.decode(), "") for h in _AUTH},
        )

    async def _answer(self, scope: Scope, send: Send, route: r.Route, run: Callable[[], Awaitable[Any]]) -> None:
        scope["route"] = self.routes[route.key]
        try:
            result = await run()
        except ApiError as e:
            await self.error(e.status, e.code, e.message)(scope, _no_body, send)
            return
        except Exception as e:  # noqa: BLE001 - the same answer as the app's catch-all handler
            log.error("internal error: %s", type(e).__name__)
            await self.error(500, "internal", "internal error; see the server log")(scope, _no_body, send)
            return
        if isinstance(result, bytes):
            payload, headers = result, [(b"content-type", b"application/octet-stream"), (b"cache-control", b"no-store")]
        else:
            payload = json.dumps(result, separators=(",", ":")).encode()
            headers = [(b"content-type", b"application/json")]
        headers.append((b"content-length", str(len(payload)).encode()))
        await send({"type": "http.response.start", "status": route.status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    async def _get(self, scope: Scope, body: bytes, send: Send) -> None:
        q = r.DEPOSIT_GET.parse_query(scope.get("query_string", b""))
        owner, version = q["owner"], q["version"]
        name = scope["path"][len(DEPOSITS) :]
        req = self._signed(scope, body)
        service, link = self.service, self.link

        async def run() -> dict[str, Any]:
            out: dict[str, Any] = await link.call("get", req.raw_path, service.verify_signature(req), (name, owner, version))
            out["data"] = base64.b64encode(out["data"]).decode()
            return out

        await self._answer(scope, send, r.DEPOSIT_GET, run)

    async def _put(self, scope: Scope, body: bytes, send: Send) -> None:
        if scope.get("query_string") or not _is_json(scope):
            raise PassOn
        try:
            model = r.PutRequest.model_validate_json(body)
        except ValidationError:
            raise PassOn from None
        name = scope["path"][len(DEPOSITS) :]
        req = self._signed(scope, body)
        service, link = self.service, self.link

        async def run() -> dict[str, Any]:
            data = deposit_bytes(model.data, service.config.deposit_limit)
            policy = model.policy.to_policy() if model.policy is not None else None
            p = None if policy is None else (policy.readers, policy.expires_at, policy.not_before, policy.max_retrievals)
            result: dict[str, Any] = await link.call("put", req.raw_path, service.verify_signature(req), (name, data, p))
            return result

        await self._answer(scope, send, r.DEPOSIT_PUT, run)

    async def _entropy(self, scope: Scope, body: bytes, send: Send) -> None:
        n = r.ENTROPY.parse_query(scope.get("query_string", b""))["bytes"]
        req = self._signed(scope, body)
        service, link = self.service, self.link

        async def run() -> bytes:
            await link.call("auth", req.raw_path, service.verify_signature(req), ())  # nonce recorded
            return service.entropy_mixer.random(n)

        await self._answer(scope, send, r.ENTROPY, run)

    async def _register(self, scope: Scope, body: bytes, send: Send) -> None:
        if scope.get("query_string") or not _is_json(scope):
            raise PassOn
        try:
            model = r.RegisterRequest.model_validate_json(body)
        except ValidationError:
            raise PassOn from None
        client = scope.get("client")
        source = client[0] if client else "unknown"
        service, link = self.service, self.link

        async def run() -> dict[str, Any]:
            pub = service.register_check(model.org, model.name, model.public_key, source)
            digest = secret_hash(model.auth_secret)
            out: dict[str, Any] = await link.call(
                "register", r.REGISTER.path, ("", "", 0), (model.org, digest, model.name, pub, source)
            )
            return out

        await self._answer(scope, send, r.REGISTER, run)


def _has_body(scope: Scope) -> bool:
    for k, v in scope["headers"]:
        if k == b"content-length" and v != b"0":
            return True
        if k == b"transfer-encoding":
            return True
    return False


def _is_json(scope: Scope) -> bool:
    for k, v in scope["headers"]:
        if k == b"content-type":
            return bool(v.split(b";")[0].strip().lower() == b"application/json")
    return False


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            break
        parts.append(msg.get("body", b""))
        if not msg.get("more_body", False):
            break
    return b"".join(parts)


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}
