"""The server's ASGI app assembled: the outer layers (errors, lifespan, metrics, documents) over
the two APIs' fronts (front.py, vault/http.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from strongroom.server import openapi
from strongroom.server.asgi import ASGIApp, QuietErrors, Receive, Scope, Send
from strongroom.server.front import TABLE, DepositFront, send_answer
from strongroom.server.messages import Checked, VaultOutcome, VaultRequest
from strongroom.server.nodes import NodeAgent
from strongroom.server.service import Service
from strongroom.server.tlsreload import Reloader
from strongroom.server.vault.http import VaultFront
from strongroom.server.writerlink import WriterLink

log = logging.getLogger("strongroom.server.api")
TICK_SECONDS = 0.5
TLS_CHECK_SECONDS = 2.0
REQUEST_TIMEOUT = 30.0  # the longest a request waits for the writer process


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
        self.cert_expiry = Gauge(
            "strongroom_tls_cert_expiry_timestamp_seconds",
            "notAfter of each certificate in the TLS dir (server, ca, client certificates issued from it)",
            ["cert"],
            registry=self.registry,
        )
        self.kmip = Counter(
            "strongroom_kmip_items", "KMIP batch items (and messages refused whole) answered", ["operation", "result"],
            registry=self.registry,
        )  # fmt: skip
        self._series: dict[tuple[str, str, int], tuple[Any, Any]] = {}  # labels() looked up once per series
        self._kmip: dict[tuple[str, str], Any] = {}

    def kmip_item(self, operation: str, result: str) -> None:
        """One answered KMIP batch item (bounded labels: operation and result names)."""
        child = self._kmip.get((operation, result))
        if child is None:
            child = self._kmip[(operation, result)] = self.kmip.labels(operation, result)
        child.inc()

    def observe(self, scope: Scope, status: int, seconds: float) -> None:
        """One answered request, by route template (``unmatched`` when no table route took it)."""
        key = (getattr(scope.get("route"), "path", "unmatched"), scope["method"], status)
        series = self._series.get(key)
        if series is None:  # bounded: route templates x methods x statuses
            route, method = key[0], key[1]
            series = self._series[key] = (
                self.requests.labels(route, method, str(status)),
                self.latency.labels(route, method),
            )
        series[0].inc()
        series[1].observe(seconds)


class Lifespan:
    """ASGI lifespan: this process joins the servers' seal-state sharing (nodes.py) at start,
    ticks it, and leaves at stop; it also looks for a renewed TLS certificate (tlsreload.py)."""

    def __init__(self, app: ASGIApp, agent: NodeAgent | None, reloader: Reloader | None = None) -> None:
        self.app = app
        self.agent = agent
        self.reloader = reloader

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        agent, task = self.agent, None
        watch: asyncio.Task[None] | None = None
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if agent is not None:
                    try:
                        await asyncio.to_thread(agent.join)
                    except Exception as e:  # noqa: BLE001 - reported to the server, which stops
                        await send({"type": "lifespan.startup.failed", "message": type(e).__name__})
                        return
                    task = asyncio.create_task(_tick(agent))
                if self.reloader is not None:
                    self.reloader.warn()
                    watch = asyncio.create_task(_watch_tls(self.reloader))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if watch is not None:
                    watch.cancel()
                if task is not None and agent is not None:
                    task.cancel()
                    await asyncio.to_thread(agent.leave)
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _tick(agent: NodeAgent) -> None:
    while True:
        try:
            await asyncio.to_thread(agent.tick)
        except Exception as e:  # noqa: BLE001 - a database outage must not kill the loop
            log.warning("seal-state tick failed: %s", type(e).__name__)
        await asyncio.sleep(TICK_SECONDS)


async def _watch_tls(reloader: Reloader) -> None:
    while True:
        await asyncio.sleep(TLS_CHECK_SECONDS)
        try:
            reloader.check()
        except Exception as e:  # noqa: BLE001 - the watch must outlive a bad moment
            log.warning("TLS certificate check failed: %s", type(e).__name__)


class Documents:
    """``GET /metrics`` and ``GET /openapi.json``, outside the route table; the rest to ``app``."""

    def __init__(
        self, app: ASGIApp, service: Service, link: WriterLink, metrics: Metrics, reloader: Reloader | None = None
    ) -> None:
        self.app = app
        self.reloader = reloader
        self.service = service
        self.link = link
        self.metrics = metrics
        self.openapi = json.dumps(openapi.describe(TABLE)).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if scope["method"] != "GET" or path not in ("/metrics", "/openapi.json"):
            await self.app(scope, receive, send)
            return
        if path == "/openapi.json":
            await send_answer(send, 200, self.openapi, [(b"content-type", b"application/json")])
            return
        await send_answer(send, 200, await self._metrics(), [(b"content-type", CONTENT_TYPE_LATEST.encode())])

    async def _metrics(self) -> bytes:
        metrics, service = self.metrics, self.service
        metrics.sealed.set(1 if service.barrier.sealed else 0)
        local = service.committer.stats  # this worker's own (unseal's audit entries)
        batches, actions, seconds = float(local.batches), float(local.actions), local.seconds
        remote = await self.link.stats()
        if remote is not None:  # the writer process runs every other action
            batches, actions, seconds = batches + remote["batches"], actions + remote["actions"], seconds + remote["seconds"]
        metrics.batches.set(batches)
        metrics.batched.set(actions)
        metrics.batch_seconds.set(seconds)
        mix = service.entropy_mixer.status()
        metrics.mixed.set(int(mix["mixed"]))  # type: ignore[call-overload]
        metrics.unmixed.set(int(mix["unmixed"]))  # type: ignore[call-overload]
        metrics.mix_in_use.set(1 if mix["in_use"] else 0)
        if self.reloader is not None:
            for name, when in self.reloader.expiries().items():
                metrics.cert_expiry.labels(name).set(when)
        return bytes(generate_latest(metrics.registry))


def create_app(
    service: Service,
    link: WriterLink,
    agent: NodeAgent | None = None,
    reloader: Reloader | None = None,
    metrics: Metrics | None = None,
) -> ASGIApp:
    """The server's ASGI app: the Vault API's paths to vault/http.py, every other to the deposit
    API's pipeline (front.py); each request's action runs in the writer process through ``link``.
    ``metrics``: this process's, shared with its KMIP listener."""
    limit = service.config.deposit_limit * 4 // 3 + 65536
    metrics = metrics or Metrics()
    deposits = DepositFront(service, link, limit, agent)

    async def in_writer(raw_path: str, req: VaultRequest, checked: Checked | None) -> VaultOutcome:
        out: VaultOutcome = await link.call(raw_path, checked, req)
        return out

    vault = VaultFront(deposits, service=service, limit=limit, run=in_writer)
    return QuietErrors(Lifespan(Documents(vault, service, link, metrics, reloader), agent, reloader), metrics.observe)
