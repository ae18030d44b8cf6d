"""The HTTP API (docs/API.md): routes, JSON errors, body limits and metrics over the Service."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from typing import Any, Literal, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from strongroom.crypto import reqsig
from strongroom.server import routes as r
from strongroom.server.asgi import QuietErrors, replay, request_message
from strongroom.server.errors import ApiError, Unavailable
from strongroom.server.hotpath import HotPath, deposit_bytes
from strongroom.server.nodes import NodeAgent
from strongroom.server.routes import (
    EventsRequest,
    GroupChange,
    NameRequest,
    PolicyModel,
    PutRequest,
    RegisterRequest,
    UnsealRequest,
)
from strongroom.server.service import Checked, Service, SignedRequest
from strongroom.server.vault.http import PREFIXES as VAULT_PREFIXES
from strongroom.server.vault.http import Outcome, VaultFront, Wire
from strongroom.server.writer import NOT_SIGNED
from strongroom.server.writerlink import WriterLink

log = logging.getLogger("strongroom.server.api")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
TICK_SECONDS = 0.5
_AUTH_HEADERS = (reqsig.HEADER_CLIENT, reqsig.HEADER_TIME, reqsig.HEADER_NONCE, reqsig.HEADER_SIG)


REQUEST_TIMEOUT = 30.0


async def _bounded(fut: Future[T]) -> T:
    """Await a group-commit result, answering 503 rather than hanging if the database never frees up."""
    try:
        return await asyncio.wait_for(asyncio.wrap_future(fut), REQUEST_TIMEOUT)
    except TimeoutError:
        raise Unavailable("the database did not answer in time; retry later") from None


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status)


class BodyLimit:
    """Refuse request bodies over a limit with 413 before reading them into memory."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    def _too_large(self, scope: Scope) -> JSONResponse:
        """413 in the shape of the API the path belongs to (Vault's clients read ``errors``)."""
        message = f"request body over {self.limit} bytes"
        if str(scope.get("path", "")).startswith(VAULT_PREFIXES):
            return JSONResponse({"errors": [message]}, status_code=413)
        return _error(413, "too_large", message)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    too_big = int(v) > self.limit
                except ValueError:
                    too_big = True
                if too_big:
                    await self._too_large(scope)(scope, receive, send)
                    return
        if any(k == b"content-length" for k, _ in scope.get("headers", [])):
            await self.app(scope, receive, send)  # the server enforces the declared length
            return
        # No declared length (chunked): read up to the limit here, then replay it.
        body = bytearray()
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                await self.app(scope, replay(msg), send)
                return
            body += msg.get("body", b"")
            if len(body) > self.limit:
                await self._too_large(scope)(scope, receive, send)
                return
            if not msg.get("more_body", False):
                break
        await self.app(scope, replay(request_message(bytes(body)), receive), send)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "strongroom_requests", "HTTP requests answered", ["route", "method", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "strongroom_request_seconds",
            "HTTP request latency",
            ["route", "method"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.sealed = Gauge("strongroom_sealed", "1 while this server process is sealed", registry=self.registry)
        self.batches = Gauge(
            "strongroom_commit_batches", "group commits by this worker and the writer process", registry=self.registry
        )
        self.batched = Gauge("strongroom_commit_actions", "actions committed in group commits", registry=self.registry)
        self.batch_seconds = Gauge(
            "strongroom_commit_seconds", "seconds spent in group commits (lock wait included)", registry=self.registry
        )
        self.mixed = Gauge("strongroom_entropy_mixed", "entropy answers mixed with the hardware source", registry=self.registry)
        self.unmixed = Gauge(
            "strongroom_entropy_unmixed",
            "entropy answers from getrandom alone while mixing is configured (hardware buffer empty or source failed)",
            registry=self.registry,
        )
        self.mix_in_use = Gauge(
            "strongroom_entropy_mix_in_use", "1 while the mixed hardware source passes its tests", registry=self.registry
        )


class MetricsMiddleware:
    """Counts and times requests by route template (pure ASGI: BaseHTTPMiddleware cost 3x throughput)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self._series: dict[tuple[str, str, int], tuple[Any, Any]] = {}  # labels() looked up once per series

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            key = (getattr(scope.get("route"), "path", "unmatched"), scope["method"], status)
            series = self._series.get(key)
            if series is None:  # bounded: route templates x methods x statuses
                route, method = key[0], key[1]
                series = self._series[key] = (
                    self.metrics.requests.labels(route, method, str(status)),
                    self.metrics.latency.labels(route, method),
                )
            series[0].inc()
            series[1].observe(time.perf_counter() - start)


def create_app(service: Service, link: WriterLink, agent: NodeAgent | None = None) -> ASGIApp:
    """The API; the hot routes' actions run in the server's writer process through ``link``."""
    limit = service.config.deposit_limit * 4 // 3 + 65536
    metrics = Metrics()

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        task = None
        if agent is not None:
            await run_in_threadpool(agent.join)

            async def ticker() -> None:
                while True:
                    try:
                        await run_in_threadpool(agent.tick)
                    except Exception as e:  # noqa: BLE001 - a database outage must not kill the loop
                        log.warning("seal-state tick failed: %s", type(e).__name__)
                    await asyncio.sleep(TICK_SECONDS)

            task = asyncio.create_task(ticker())
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                await run_in_threadpool(agent.leave)  # type: ignore[union-attr]

    app = FastAPI(
        title="Strongroom key trustee",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        description="Deposits, policy, entropy and audit. Every /v1 route except /v1/register is signed: see docs/API.md.",
    )

    hot_routes: dict[str, Any] = {}  # filled below, once the routes exist

    def route(spec: r.Route, **extra: Any) -> Callable[[F], F]:
        """A FastAPI route from the table's entry (path, method, success status)."""
        return app.api_route(spec.path, methods=[spec.method], status_code=spec.status, **extra)

    @app.exception_handler(ApiError)
    async def _api_error(_r: Request, e: ApiError) -> JSONResponse:
        return _error(e.status, e.code, e.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_r: Request, e: RequestValidationError) -> JSONResponse:
        parts = []
        for err in e.errors()[:5]:
            where = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        return _error(422, "invalid_request", "; ".join(parts) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_r: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "bad_request")
        return _error(e.status_code, code, str(e.detail))

    @app.exception_handler(Exception)
    async def _unexpected(_r: Request, e: Exception) -> JSONResponse:
        # The type only: a message could carry request content.
        log.error("internal error: %s", type(e).__name__)
        return _error(500, "internal", "internal error; see the server log")

    async def signed_request(request: Request) -> SignedRequest:
        return SignedRequest(
            method=request.method,
            raw_path=(request.scope.get("raw_path") or request.scope["path"].encode()).decode("latin-1"),
            raw_query=request.scope.get("query_string", b"").decode("latin-1"),
            body=await request.body(),
            headers={h: request.headers.get(h, "") for h in _AUTH_HEADERS},
        )

    async def signed(request: Request, fn: Callable[[Any], T], admin: bool = False) -> T:
        req = await signed_request(request)
        return await _bounded(service.signed_future(req, fn, admin))

    # -- public ------------------------------------------------------------------------------
    @route(r.HEALTH)
    async def health() -> dict[str, Any]:
        return {"status": "ok", "sealed": service.barrier.sealed}

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint() -> Response:
        metrics.sealed.set(1 if service.barrier.sealed else 0)
        local = service.committer.stats
        batches, actions, seconds = float(local.batches), float(local.actions), local.seconds
        remote = await link.stats()
        if remote is not None:  # the writer process runs the hot routes' batches
            batches, actions, seconds = batches + remote["batches"], actions + remote["actions"], seconds + remote["seconds"]
        metrics.batches.set(batches)
        metrics.batched.set(actions)
        metrics.batch_seconds.set(seconds)
        mix = service.entropy_mixer.status()
        metrics.mixed.set(int(mix["mixed"]))  # type: ignore[call-overload]
        metrics.unmixed.set(int(mix["unmixed"]))  # type: ignore[call-overload]
        metrics.mix_in_use.set(1 if mix["in_use"] else 0)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @route(r.REGISTER)
    async def register(body: RegisterRequest, request: Request) -> dict[str, Any]:
        source = request.client.host if request.client else "unknown"
        return await _bounded(service.register_future(body.org, body.auth_secret, body.name, body.public_key, source))

    # -- clients -----------------------------------------------------------------------------
    @route(r.WHOAMI)
    async def whoami(request: Request) -> dict[str, Any]:
        return await signed(request, service.whoami)

    @route(r.DEPOSIT_PUT)
    async def put_deposit(name: str, body: PutRequest, request: Request) -> dict[str, Any]:
        data = deposit_bytes(body.data, service.config.deposit_limit)
        policy = body.policy.to_policy() if body.policy is not None else None
        return await signed(request, lambda ctx: service.put(ctx, name, data, policy))

    @route(r.DEPOSIT_GET)
    async def get_deposit(
        name: str,
        request: Request,
        owner: str | None = r.DEPOSIT_GET.param("owner"),
        version: int | None = r.DEPOSIT_GET.param("version"),
    ) -> dict[str, Any]:
        out = await signed(request, lambda ctx: service.get(ctx, name, owner, version))
        out["data"] = base64.b64encode(out["data"]).decode()
        return out

    @route(r.DEPOSITS_LIST)
    async def list_deposits(request: Request, shared: bool = r.DEPOSITS_LIST.param("shared")) -> list[dict[str, Any]]:
        return await signed(request, lambda ctx: service.list_deposits(ctx, shared))

    @route(r.DEPOSIT_DELETE)
    async def delete_deposit(name: str, request: Request) -> dict[str, Any]:
        return await signed(request, lambda ctx: service.delete(ctx, name))

    @route(r.POLICY_PUT)
    async def set_policy(name: str, body: PolicyModel, request: Request) -> dict[str, Any]:
        return await signed(request, lambda ctx: service.set_policy(ctx, name, body.to_policy()))

    @route(r.EVENTS)
    async def events(body: EventsRequest, request: Request) -> dict[str, Any]:
        """Access-control denials reported by this client's mounts, into the audit log."""
        batch = [e.model_dump() for e in body.acl_denials]
        return await signed(request, lambda ctx: service.record_acl_denials(ctx, batch))

    @route(
        r.ENTROPY,
        response_class=Response,
        responses={200: {"content": {"application/octet-stream": {}}, "description": "N random bytes"}},
    )
    async def entropy(request: Request, bytes: int = r.ENTROPY.param("bytes")) -> Response:  # noqa: A002
        n = bytes
        data = await signed(request, lambda ctx: service.entropy(ctx, n))
        return Response(data, media_type="application/octet-stream", headers={"cache-control": "no-store"})

    # -- admin -------------------------------------------------------------------------------
    @route(r.UNSEAL)
    async def unseal(body: UnsealRequest, request: Request) -> dict[str, Any]:
        req = await signed_request(request)
        out = await run_in_threadpool(service.unseal, req, body.passphrase)
        if out.get("changed") and agent is not None:
            try:
                await run_in_threadpool(agent.tick)  # grant the other processes now, not at the next tick
            except Exception as e:  # noqa: BLE001 - unsealed all the same; the ticker grants them later
                log.warning("could not hand out grants right after unsealing: %s", type(e).__name__)
        return out

    @route(r.SEAL)
    async def seal(request: Request) -> dict[str, Any]:
        out = await signed(request, service.seal, admin=True)
        service.barrier.seal()
        return out

    @route(r.ROTATE_MASTER_KEY)
    async def rotate(request: Request) -> dict[str, Any]:
        out = await signed(request, service.rotate_master_key, admin=True)
        await run_in_threadpool(service.after_rotation)
        return out

    @route(r.ORG_CREATE)
    async def create_org(body: NameRequest, request: Request) -> dict[str, Any]:
        return await signed(request, lambda ctx: service.create_org(ctx, body.name), admin=True)

    @route(r.ORGS_LIST)
    async def list_orgs(request: Request) -> list[dict[str, Any]]:
        return await signed(request, service.list_orgs, admin=True)

    @route(r.ORG_ROTATE_SECRET)
    async def rotate_secret(org: str, request: Request) -> dict[str, Any]:
        return await signed(request, lambda ctx: service.rotate_org_secret(ctx, org), admin=True)

    @route(r.CLIENTS_LIST)
    async def list_clients(request: Request) -> list[dict[str, Any]]:
        return await signed(request, service.list_clients, admin=True)

    @route(r.CLIENT_STATUS)
    async def client_status(client_id: str, action: Literal["enable", "disable", "revoke"], request: Request) -> dict[str, Any]:
        status = {"enable": "active", "disable": "disabled", "revoke": "revoked"}[action]
        return await signed(request, lambda ctx: service.set_client_status(ctx, client_id, status), admin=True)

    @route(r.GROUPS_LIST)
    async def list_groups(org: str, request: Request) -> list[dict[str, Any]]:
        return await signed(request, lambda ctx: service.list_groups(ctx, org), admin=True)

    @route(r.GROUP_CREATE)
    async def create_group(org: str, body: NameRequest, request: Request) -> dict[str, Any]:
        return await signed(request, lambda ctx: service.create_group(ctx, org, body.name), admin=True)

    @route(r.GROUP_CHANGE)
    async def change_group(org: str, name: str, body: GroupChange, request: Request) -> dict[str, Any]:
        return await signed(request, lambda ctx: service.change_group(ctx, org, name, body.add, body.remove), admin=True)

    @route(r.GROUP_DELETE)
    async def delete_group(org: str, name: str, request: Request) -> dict[str, Any]:
        return await signed(request, lambda ctx: service.delete_group(ctx, org, name), admin=True)

    @route(r.AUDIT)
    async def audit_tail(
        request: Request, after: int = r.AUDIT.param("after"), limit: int = r.AUDIT.param("limit")
    ) -> list[dict[str, Any]]:
        return await signed(request, lambda ctx: service.audit_tail(ctx, after, limit), admin=True)

    for made in app.routes:
        if isinstance(made, APIRoute):
            for method in made.methods or ():
                hot_routes[f"{made.path}:{method}"] = made
    # The plain-ASGI layers sit in front of the FastAPI app, not inside its middleware stack, so
    # the hot routes skip FastAPI's own layers (error, telemetry and body-limit middleware), each
    # of which wrapped every response message.
    front = HotPath(app, service=service, routes=hot_routes, error=_error, link=link)
    async def in_writer(raw_path: str, wire: Wire, checked: Checked | None) -> Outcome:
        out: Outcome = await link.call("vault", raw_path, checked or NOT_SIGNED, wire)
        return out

    vault = VaultFront(front, service=service, limit=limit, run=in_writer)
    return QuietErrors(MetricsMiddleware(BodyLimit(vault, limit=limit), metrics=metrics))
