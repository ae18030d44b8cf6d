"""ASGI helpers shared by the API's plain layers (api.py's body limit, hotpath.py)."""

from __future__ import annotations

from starlette.types import Message, Receive


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
