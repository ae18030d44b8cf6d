"""The outermost ASGI layer: no exception leaves the app with request data in it."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

# The ASGI interface's types (asgiref's spec), written here rather than taken from a framework.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("strongroom.server")


class QuietErrors:
    """The outermost layer: an exception that leaves the app is logged by its type alone and
    answered 500 if nothing was answered yet (a server logs an escaped exception with its
    traceback and message, which can carry request content: a value that failed to parse, a
    name).  It also hands each answered request's status and time to ``observe`` (the metrics):
    one layer that watches what is sent, not two."""

    def __init__(self, app: ASGIApp, observe: Callable[[Scope, int, float], None] | None = None) -> None:
        self.app = app
        self.observe = observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 0  # nothing answered yet

        async def tracked(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as e:  # noqa: BLE001 - the type only, never the message or traceback
            log.error("internal error: %s", type(e).__name__)
            if not status:
                status = 500
                body = json.dumps({"error": "internal", "message": "internal error; see the server log"}).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 500, "headers": headers})
                await send({"type": "http.response.body", "body": body})
        finally:
            if self.observe is not None:
                self.observe(scope, status or 500, time.perf_counter() - start)
