"""The outermost ASGI layer: no exception leaves the app with request data in it."""

from __future__ import annotations

import json
import logging
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
    answered 500 if nothing was answered yet.  Starlette re-raises an exception after its
    handler answered it, and the server then logs the traceback, whose message can carry request
    content (a value that failed to parse, a name)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as e:  # noqa: BLE001 - the type only, never the message or traceback
            log.error("internal error: %s", type(e).__name__)
            if scope["type"] == "http" and not started:
                body = json.dumps({"error": "internal", "message": "internal error; see the server log"}).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 500, "headers": headers})
                await send({"type": "http.response.body", "body": body})
