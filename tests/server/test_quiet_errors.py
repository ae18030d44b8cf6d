"""No traceback and no request content in the server's log when a request meets a bug (issue 37,
point 9): an app that answers 500 and then re-raises (as Starlette does), or raises before any
answer, and uvicorn logs the exception with its traceback and message -- which can carry the
request's own text.  The fault is a handler that raises (a bug cannot be caused for real on
purpose)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from strongroom.server.asgi import QuietErrors

pytestmark = pytest.mark.unit
SECRET = "the-request-said-this"


def _app() -> Any:
    """Answers 500 through its own handler, then re-raises the handler's error."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        q = scope["query_string"].decode()
        await send({"type": "http.response.start", "status": 500, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"error": "internal", "message": "internal error"}'})
        raise ValueError(f"invalid literal for int(): {q!r}")

    return app


def _get(app: object) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=True)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://s") as http:
            return await http.get("/boom", params={"q": SECRET})

    return asyncio.run(go())


def test_the_bare_app_lets_the_exception_out() -> None:
    """What the server saw before: the exception, message and all, after the 500 was answered."""
    with pytest.raises(ValueError, match=SECRET):
        _get(_app())


def test_quiet_errors_logs_the_type_alone(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        r = _get(QuietErrors(_app()))
    assert r.status_code == 500 and r.json()["error"] == "internal"
    server = [rec for rec in caplog.records if not rec.name.startswith(("httpx", "httpcore", "asyncio"))]  # not the test's client
    text = "\n".join(rec.getMessage() + str(rec.exc_info or "") + str(rec.exc_text or "") for rec in server)
    assert "ValueError" in text and SECRET not in text and "Traceback" not in text


def test_an_exception_before_any_answer_gets_a_json_500() -> None:
    async def raw(scope: object, receive: object, send: object) -> None:
        raise RuntimeError(SECRET)

    r = _get(QuietErrors(raw))
    assert r.status_code == 500 and r.json()["error"] == "internal" and SECRET not in r.text


def test_the_servers_app_is_wrapped() -> None:
    from types import SimpleNamespace

    from strongroom.server.api import create_app

    app = create_app(SimpleNamespace(config=SimpleNamespace(deposit_limit=1 << 20)), None)  # type: ignore[arg-type]
    assert isinstance(app, QuietErrors)


def test_observe_sees_the_status_answered_and_a_500_for_an_escape() -> None:
    seen: list[int] = []

    async def created(scope: object, receive: object, send: Any) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def raw(scope: object, receive: object, send: object) -> None:
        raise RuntimeError(SECRET)

    assert _get(QuietErrors(created, lambda scope, status, seconds: seen.append(status))).status_code == 201
    assert _get(QuietErrors(raw, lambda scope, status, seconds: seen.append(status))).status_code == 500
    assert seen == [201, 500]
