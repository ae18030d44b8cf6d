"""ASGI helpers shared by the API's plain layers (api.py's body limit, hotpath.py)."""

from __future__ import annotations

import json
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("strongroom.server")


def request_message(body: bytes) -> Message:
    return {"type": "http.request", "body": body, "more_body": False}


def replay(first: Message, then: Receive | None = None) -> Receive:
    """A ``receive`` that gives ``first`` again, then goes on with ``then`` (or a disconnect):
    for handing on a request whose body a layer has already read."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return first
        if then is None:
            return {"type": "http.disconnect"}
        return await then()

    return receive


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
