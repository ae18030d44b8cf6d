"""The route table (server/routes.py) is where the API's paths, statuses and parameter bounds are
written once: the fast path parses with it, and the OpenAPI schema of the FastAPI app shows the
same bounds."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from strongroom.server import routes as r
from strongroom.server.api import create_app
from strongroom.server.service import MAX_ENTROPY, MAX_OWNER_CHARS, MAX_VERSION

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("query", "want"),
    [
        (b"", {"owner": None, "version": None}),
        (b"version=1", {"owner": None, "version": 1}),
        (b"owner=c1&version=" + str(MAX_VERSION).encode(), {"owner": "c1", "version": MAX_VERSION}),
        (b"owner=" + b"x" * MAX_OWNER_CHARS, {"owner": "x" * MAX_OWNER_CHARS, "version": None}),
    ],
)
def test_well_formed_queries_parse(query: bytes, want: dict[str, Any]) -> None:
    assert r.DEPOSIT_GET.parse_query(query) == want


@pytest.mark.parametrize(
    "query",
    [
        b"version=0",
        b"version=" + str(MAX_VERSION + 1).encode(),
        b"version=-1",
        b"version=1e3",
        b"version=%C2%B2",  # a digit outside ASCII
        b"owner=" + b"x" * (MAX_OWNER_CHARS + 1),
        b"version=1&version=2",
        b"other=1",
    ],
)
def test_anything_else_is_passed_on(query: bytes) -> None:
    with pytest.raises(r.PassOn):
        r.DEPOSIT_GET.parse_query(query)


def test_a_required_parameter_must_be_there() -> None:
    with pytest.raises(r.PassOn):
        r.ENTROPY.parse_query(b"")
    assert r.ENTROPY.parse_query(b"bytes=" + str(MAX_ENTROPY).encode()) == {"bytes": MAX_ENTROPY}


def test_the_openapi_schema_shows_the_tables_bounds_and_statuses() -> None:
    app: Any = create_app(SimpleNamespace(config=SimpleNamespace(deposit_limit=1 << 20)), None)  # type: ignore[arg-type]
    while not hasattr(app, "openapi"):
        app = app.app
    spec = app.openapi()
    get = {p["name"]: p["schema"] for p in spec["paths"][r.DEPOSIT_GET.path]["get"]["parameters"] if p["in"] == "query"}
    version = next(s for s in get["version"]["anyOf"] if s.get("type") == "integer")
    owner = next(s for s in get["owner"]["anyOf"] if s.get("type") == "string")
    assert (version["minimum"], version["maximum"], owner["maxLength"]) == (1, MAX_VERSION, MAX_OWNER_CHARS)
    entropy = spec["paths"][r.ENTROPY.path]["get"]["parameters"][0]
    assert entropy["required"] and entropy["schema"]["maximum"] == MAX_ENTROPY
    table = [v for v in vars(r).values() if isinstance(v, r.Route)]
    for route in table:
        assert str(route.status) in spec["paths"][route.path][route.method.lower()]["responses"], route.key
    assert {(p, m) for p, ms in spec["paths"].items() for m in ms} == {(t.path, t.method.lower()) for t in table}
