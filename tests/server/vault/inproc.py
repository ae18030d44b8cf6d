"""The Vault-compatible front end in-process on a real SQLite database, barrier and committer, with
the service's clock injected (tests/server/test_clock.py's host), called through ASGI."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx

from strongroom.server.messages import Checked, VaultOutcome, VaultRequest
from strongroom.server.vault.http import VaultEngine, VaultFront
from tests.server.test_clock import Host


async def _not_vault(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 599, "headers": []})
    await send({"type": "http.response.body", "body": b""})


@dataclass
class Reply:
    status: int
    body: Any

    @property
    def data(self) -> Any:
        return self.body["data"]


class Vault:
    def __init__(self, host: Host) -> None:
        self.host = host
        engine = VaultEngine(host.service)  # the writer process's part, here in-process

        async def run(raw_path: str, req: VaultRequest, checked: Checked | None) -> VaultOutcome:
            out: VaultOutcome = await asyncio.wrap_future(host.service.submit(engine.action(raw_path, req, checked)))
            return out

        self.front = VaultFront(_not_vault, host.service, limit=1 << 20, run=run)

    def call(self, method: str, path: str, token: str | None = None, body: Any = None, signed: bool = False) -> Reply:
        content = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
        headers = {"x-vault-token": token} if token else {}
        if signed:
            headers.update(self.host.request(method, "/v1/" + path, content).headers)

        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.front)
            async with httpx.AsyncClient(transport=transport, base_url="http://vault") as http:
                return await http.request(method, "/v1/" + path, content=content, headers=headers)

        r = asyncio.run(go())
        return Reply(r.status_code, r.json() if r.content else None)

    def login(self, **params: Any) -> str:
        r = self.call("POST", "auth/strongroom/login", body=params, signed=True)
        assert r.status == 200, r.body
        return str(r.body["auth"]["client_token"])
