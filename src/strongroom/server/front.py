"""The deposit API's request pipeline: every request to a route of the table (routes.py) takes
this one path, whatever its query string or body.

    match the route (404, 405) → read the body (413) → parse the query and the body by the
    table (422) → check the signature (401) → send the route's message to the writer process
    (messages.py, run there by actions.py) → answer its result, or its error in this API's shape

Three routes do part of their work here, in the worker: ``/health`` (this process's seal
state), ``/v1/unseal`` (derives the unseal key here, then hands the other processes grants,
nodes.py) and ``/v1/entropy`` (authenticated in the writer, the bytes drawn here).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from strongroom.crypto.identity import unb64u
from strongroom.server import barrier as barrier_mod
from strongroom.server import messages as m
from strongroom.server import routes as r
from strongroom.server.asgi import Scope, Send
from strongroom.server.errors import ApiError, BadRequest, Invalid, NotFound, Sealed, TooLarge, Unavailable
from strongroom.server.identities import secret_hash
from strongroom.server.nodes import NodeAgent
from strongroom.server.request import raw_path, read_body, signed_request
from strongroom.server.service import Service
from strongroom.server.writerlink import WriterLink

log = logging.getLogger("strongroom.server.api")

TABLE: tuple[r.Route, ...] = tuple(v for v in vars(r).values() if isinstance(v, r.Route))
_JSON = [(b"content-type", b"application/json")]
_BYTES = [(b"content-type", b"application/octet-stream"), (b"cache-control", b"no-store")]


class MethodNotAllowed(ApiError):
    status, code = 405, "method_not_allowed"


def deposit_bytes(data_b64: str, limit: int) -> bytes:
    """A put's content from its JSON body (standard base64), within the server's deposit limit."""
    try:
        data = base64.b64decode(data_b64, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("data must be standard base64") from None
    if len(data) > limit:
        raise TooLarge(f"deposit is larger than the server's limit of {limit} bytes")
    return data


class Router:
    """Paths to routes: each template's literal segments must match, each ``{part}`` takes one
    non-empty segment (one of its ``choices`` if it has them)."""

    def __init__(self, table: tuple[r.Route, ...]) -> None:
        self.exact: dict[str, list[r.Route]] = {}  # templates without parts, by path
        self.by_length: dict[int, list[tuple[r.Route, list[str]]]] = {}  # the others, by segment count
        for route in table:
            if "{" not in route.path:
                self.exact.setdefault(route.path, []).append(route)
            else:
                segments = route.path.split("/")
                self.by_length.setdefault(len(segments), []).append((route, segments))

    def match(self, method: str, path: str) -> tuple[r.Route, dict[str, str]]:
        allowed = False
        for route in self.exact.get(path, ()):
            if route.method == method:
                return route, {}
            allowed = True
        segments = path.split("/")
        for route, template in self.by_length.get(len(segments), ()):
            parts: dict[str, str] | None = {}
            for want, got in zip(template, segments, strict=True):
                if want.startswith("{"):
                    name = want[1:-1]
                    choices = route.choices.get(name)
                    if not got or (choices is not None and got not in choices):
                        parts = None
                        break
                    parts[name] = got  # type: ignore[index]
                elif want != got:
                    parts = None
                    break
            if parts is None:
                continue
            if route.method == method:
                return route, parts
            allowed = True
        if allowed:
            raise MethodNotAllowed(f"{method} is not allowed here")
        raise NoRoute("no such route")


@dataclass
class Parts:
    """A request as its route's handler sees it: parsed and bounded, not yet authenticated."""

    scope: Scope
    path: dict[str, str]
    query: dict[str, Any]
    model: Any  # the body as the route's model, or None
    body: bytes  # the raw body, as the signature covers it


def _json_or_unsaid(scope: Scope) -> bool:
    for k, v in scope["headers"]:
        if k == b"content-type":
            media: bytes = v.split(b";")[0].strip().lower()
            return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))
    return True


class NoRoute(NotFound):
    """A path that neither API serves."""


def _no_route(path: str) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """404 in both APIs' shapes at once: this one's, and Vault's ``errors`` (as OpenBao words it
    for a path no mount serves), since a Vault client asking for an engine Strongroom lacks lands
    here, and one shape alone would leave either kind of client without a message."""
    logical = path[len("/v1/") :] if path.startswith("/v1/") else path.lstrip("/")
    vault = f'no handler for route "{logical[:200]}". route entry not found.'
    body = {"error": "not_found", "message": "no such route", "errors": [vault]}
    return 404, json.dumps(body, separators=(",", ":")).encode(), list(_JSON)


def error_response(status: int, code: str, message: str, request_id: str = "") -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """This API's error shape (an approval_required refusal also names its pending request)."""
    doc = {"error": code, "message": message, **({"request_id": request_id} if request_id else {})}
    return status, json.dumps(doc, separators=(",", ":")).encode(), list(_JSON)


async def send_answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class Typed:
    """A body with its own content type (Tang's JOSE documents)."""

    body: bytes
    ctype: bytes


def _public_key(text: str) -> bytes:
    try:
        return unb64u(text)
    except ValueError:
        raise BadRequest("public_key must be base64url") from None


def _source(p: Parts) -> str:
    client = p.scope.get("client")
    return str(client[0]) if client else "unknown"


class DepositFront:
    """ASGI: the deposit API, one pipeline for every route of the table."""

    def __init__(self, service: Service, link: WriterLink, limit: int, agent: NodeAgent | None) -> None:
        self.service = service
        self.link = link
        self.limit = limit
        self.agent = agent
        self.router = Router(TABLE)
        self.handlers: dict[str, Callable[[Parts], Awaitable[Any]]] = {
            r.HEALTH.key: self._health,
            r.REGISTER.key: self._register,
            r.UNSEAL.key: self._unseal,
            r.SEAL_STATUS.key: self._seal_status,
            r.TANG_ADV.key: self._tang_adv,
            r.TANG_ADV_SLASH.key: self._tang_adv,
            r.TANG_ADV_KID.key: self._tang_adv,
            r.TANG_REC.key: self._tang_rec,
            r.REKEY.key: self._rekey,
            r.REKEY_STATUS.key: self._rekey_status,
            r.ENTROPY.key: self._entropy,
            r.SEAL.key: self._seal,
            r.DEPOSIT_GET.key: self._get,
            r.DEPOSIT_PUT.key: self._put,
        }
        self.messages: dict[str, Callable[[Parts], Any]] = {
            r.WHOAMI.key: lambda p: m.WhoAmI(),
            r.DEPOSITS_LIST.key: lambda p: m.ListDeposits(p.query["shared"]),
            r.DEPOSIT_DELETE.key: lambda p: m.DeleteDeposit(p.path["name"]),
            r.POLICY_PUT.key: lambda p: m.SetPolicy(p.path["name"], p.model.to_policy()),
            r.EVENTS.key: lambda p: m.RecordEvents([e.model_dump() for e in p.model.acl_denials]),
            r.ROTATE_MASTER_KEY.key: lambda p: m.RotateMasterKey(),
            r.ORG_CREATE.key: lambda p: m.CreateOrg(p.model.name),
            r.ORGS_LIST.key: lambda p: m.ListOrgs(),
            r.ORG_ROTATE_SECRET.key: lambda p: m.RotateOrgSecret(p.path["org"]),
            r.CLIENTS_LIST.key: lambda p: m.ListClients(),
            r.CLIENT_STATUS.key: lambda p: m.SetClientStatus(
                p.path["client_id"], {"enable": "active", "disable": "disabled", "revoke": "revoked"}[p.path["action"]]
            ),
            r.GROUPS_LIST.key: lambda p: m.ListGroups(p.path["org"]),
            r.GROUP_CREATE.key: lambda p: m.CreateGroup(p.path["org"], p.model.name),
            r.GROUP_CHANGE.key: lambda p: m.ChangeGroup(p.path["org"], p.path["name"], p.model.add, p.model.remove),
            r.GROUP_DELETE.key: lambda p: m.DeleteGroup(p.path["org"], p.path["name"]),
            r.AUDIT.key: lambda p: m.AuditTail(p.query["after"], p.query["limit"]),
            r.APPROVALS_LIST.key: lambda p: m.ListApprovals(),
            r.KMIP_CERT.key: lambda p: m.IssueKmipCert(p.model.csr, p.model.days),
            r.TANG_ROTATE.key: lambda p: m.RotateTang(),
            r.ADMIN_CREATE.key: lambda p: m.CreateAdmin(p.model.name, _public_key(p.model.public_key)),
            r.APPROVAL_VOTE.key: lambda p: m.VoteApproval(p.path["request_id"], p.path["action"] == "approve"),
        }
        missing = {route.key for route in TABLE} - set(self.handlers) - set(self.messages)
        if missing:
            raise RuntimeError(f"routes without a handler: {sorted(missing)}")

    async def __call__(self, scope: Scope, receive: Any, send: Send) -> None:
        try:
            route, path = self.router.match(scope["method"], scope["path"])
            scope["route"] = route  # the metrics' label
            body = await read_body(scope, receive, self.limit)
            if route.body is not None and not _json_or_unsaid(scope):
                raise Invalid("the body must be JSON (content-type application/json)")
            parts = Parts(scope, path, route.parse_query(scope.get("query_string", b"")), route.parse_body(body), body)
            handler = self.handlers.get(route.key)
            result = await (handler(parts) if handler is not None else self._signed(parts, self.messages[route.key](parts)))
        except NoRoute:
            await send_answer(send, *_no_route(scope["path"]))
            return
        except ApiError as e:
            await send_answer(send, *error_response(e.status, e.code, e.message, getattr(e, "request_id", "")))
            return
        if isinstance(result, Typed):
            await send_answer(send, route.status, result.body, [(b"content-type", result.ctype)])
        elif isinstance(result, bytes):
            await send_answer(send, route.status, result, list(_BYTES))
        else:
            await send_answer(send, route.status, json.dumps(result, separators=(",", ":")).encode(), list(_JSON))

    async def _signed(self, p: Parts, message: Any) -> Any:
        """A signed request's message, run in the writer after its signature held here."""
        checked = self.service.auth.verify_signature(signed_request(p.scope, p.body))
        return await self.link.call(raw_path(p.scope), checked, message)

    # -- routes that do part of their work in this process ------------------------------------
    async def _health(self, p: Parts) -> Any:
        return {"status": "ok", "sealed": self.service.barrier.sealed}

    async def _get(self, p: Parts) -> Any:
        q = p.query
        out = await self._signed(p, m.GetDeposit(p.path["name"], q["owner"], q["version"]))
        out["data"] = base64.b64encode(out["data"]).decode()
        return out

    async def _put(self, p: Parts) -> Any:
        data = deposit_bytes(p.model.data, self.service.config.deposit_limit)
        policy = p.model.policy.to_policy() if p.model.policy is not None else None
        return await self._signed(p, m.PutDeposit(p.path["name"], data, policy))

    async def _entropy(self, p: Parts) -> Any:
        await self._signed(p, m.Authenticate())  # the nonce recorded
        return self.service.entropy_mixer.random(p.query["bytes"])

    async def _seal(self, p: Parts) -> Any:
        out = await self._signed(p, m.Seal())
        self.service.barrier.seal()  # the others see the new epoch at their next tick
        return out

    async def _tang_keys(self, p: Parts) -> Any:
        """The Tang keys, read in this worker (the writer makes the first generation once)."""
        tang, store = self.service.tang, self.service.store

        def read() -> Any:
            with store.snapshot() as tx:
                return tang.keys(tx)

        try:
            keys = await asyncio.to_thread(read)
            if keys is None:
                await self.link.call(raw_path(p.scope), None, m.TangRequest("init", None, "", _source(p)))
                keys = await asyncio.to_thread(read)
        except barrier_mod.SealedError:
            raise Sealed("the server is sealed") from None
        if keys is None:
            raise Unavailable("the Tang keys are not there yet")
        return keys

    async def _tang_adv(self, p: Parts) -> Any:
        keys = await self._tang_keys(p)
        adv = await asyncio.to_thread(self.service.tang.advertisement, keys, p.path.get("kid"))
        return Typed(adv, b"application/jose+json")

    async def _tang_rec(self, p: Parts) -> Any:
        keys, kid = await self._tang_keys(p), p.path["kid"]

        async def audit(outcome: str, **detail: Any) -> None:  # recorded before the answer, as every action
            body = json.dumps({"outcome": outcome, **detail})
            await self.link.call(raw_path(p.scope), None, m.TangRequest("audit", kid, body, _source(p)))

        try:
            gen, y = await asyncio.to_thread(self.service.tang.exchange, keys, kid, p.model.model_dump())
        except ApiError as e:
            await audit("denied", reason=e.message)
            raise
        await audit("ok", generation=gen)
        return Typed(json.dumps(y, separators=(",", ":")).encode(), b"application/jwk+json")

    async def _seal_status(self, p: Parts) -> Any:
        return await asyncio.to_thread(self.service.sealing.status, self.agent)

    def _need_agent(self) -> NodeAgent:
        if self.agent is None:
            raise Unavailable("this process cannot collect shares")
        return self.agent

    async def _rekey(self, p: Parts) -> Any:
        req, agent = signed_request(p.scope, p.body), self._need_agent()
        body = p.model.model_dump(exclude_none=True)
        return await asyncio.to_thread(self.service.sealing.rekeying.handle, req, agent, body)

    async def _rekey_status(self, p: Parts) -> Any:
        req, agent = signed_request(p.scope, p.body), self._need_agent()
        return await asyncio.to_thread(self.service.sealing.rekeying.status, req, agent)

    async def _register(self, p: Parts) -> Any:
        body = p.model
        client = p.scope.get("client")
        source = client[0] if client else "unknown"
        pub = self.service.registration.check(body.org, body.name, body.public_key, source)
        message = m.Register(body.org, secret_hash(body.auth_secret), body.name, pub, source)
        return await self.link.call(r.REGISTER.path, None, message)

    async def _unseal(self, p: Parts) -> Any:
        req = signed_request(p.scope, p.body)
        body = p.model
        out: dict[str, Any] = await asyncio.to_thread(
            self.service.sealing.unseal, req, self.agent, body.passphrase, body.share, body.reset, body.auto
        )
        if out.get("changed") and self.agent is not None:
            try:
                await asyncio.to_thread(self.agent.tick)  # grant the other processes now, not at the next tick
            except Exception as e:  # noqa: BLE001 - unsealed all the same; the ticker grants them later
                log.warning("could not hand out grants right after unsealing: %s", type(e).__name__)
        return out
