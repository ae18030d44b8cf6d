"""No traceback and no request content in the server's log when a request meets a bug (issue 37,
point 9): Starlette answers through the app's handler and then re-raises, and uvicorn logged the
re-raised exception with its traceback and message -- which can carry the request's own text.
The fault is a handler that raises (a bug cannot be caused for real on purpose)."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from strongroom.server.asgi import QuietErrors

pytestmark = pytest.mark.unit
SECRET = "the-request-said-this"


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/boom")
    async def boom(q: str) -> None:
        raise ValueError(f"invalid literal for int(): {q!r}")

    @app.exception_handler(Exception)
    async def _unexpected(_r: object, e: Exception) -> JSONResponse:
        return JSONResponse({"error": "internal", "message": "internal error"}, status_code=500)

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
