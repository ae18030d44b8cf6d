"""The route table (server/routes.py) is where the API's paths, statuses and parameter bounds are
written once: the request pipeline (front.py) parses with it, and the OpenAPI document
(openapi.py) shows the same bounds."""

from __future__ import annotations

from typing import Any

import pytest

from strongroom.server import openapi
from strongroom.server import routes as r
from strongroom.server.deposits import MAX_OWNER_CHARS, MAX_VERSION
from strongroom.server.errors import Invalid, NotFound
from strongroom.server.front import TABLE, MethodNotAllowed, Router
from strongroom.server.service import MAX_ENTROPY

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
        b"version=%EF%BC%93",  # a fullwidth digit
        b"version=1&version=2",
        b"other=1",
        b"version=1&unrelated=",
    ],
)
def test_anything_else_is_refused_422(query: bytes) -> None:
    with pytest.raises(Invalid) as e:
        r.DEPOSIT_GET.parse_query(query)
    assert e.value.status == 422


def test_negative_numbers_parse_where_the_bounds_allow() -> None:
    assert r.AUDIT.parse_query(b"after=-1&limit=5") == {"after": -1, "limit": 5}
    for bad in (b"after=-2", b"after=--1", b"after=-", b"limit=-5", b"after=-%D9%A3"):
        with pytest.raises(Invalid):
            r.AUDIT.parse_query(bad)


def test_a_required_parameter_must_be_there() -> None:
    with pytest.raises(Invalid):
        r.ENTROPY.parse_query(b"")
    assert r.ENTROPY.parse_query(b"bytes=" + str(MAX_ENTROPY).encode()) == {"bytes": MAX_ENTROPY}


def test_the_router_matches_templates_and_choices() -> None:
    router = Router(TABLE)
    assert router.match("GET", "/v1/deposits/k") == (r.DEPOSIT_GET, {"name": "k"})
    assert router.match("PUT", "/v1/deposits/k/policy") == (r.POLICY_PUT, {"name": "k"})
    assert router.match("POST", "/v1/admin/clients/c1/revoke") == (r.CLIENT_STATUS, {"client_id": "c1", "action": "revoke"})
    for path in ("/v1/deposits/", "/v1/deposits/a/b", "/v1/admin/clients/c1/explode", "/v2/deposits/k", "/"):
        with pytest.raises(NotFound):
            router.match("GET" if "deposits" in path else "POST", path)
    with pytest.raises(MethodNotAllowed):
        router.match("PATCH", "/v1/deposits/k")


def test_bodies_are_parsed_by_the_routes_model() -> None:
    assert r.DEPOSIT_PUT.parse_body(b'{"data": "YQ=="}').data == "YQ=="  # type: ignore[union-attr]
    for bad in (b"", b"nope", b"{}", b'{"data": 1}', b'{"data": "YQ==", "extra": 1}'):
        with pytest.raises(Invalid):
            r.DEPOSIT_PUT.parse_body(bad)
    assert r.WHOAMI.parse_body(b"") is None
    with pytest.raises(Invalid, match="no request body"):
        r.WHOAMI.parse_body(b"{}")


def test_the_openapi_document_shows_the_tables_bounds_and_statuses() -> None:
    spec = openapi.describe(TABLE)
    get = {p["name"]: p["schema"] for p in spec["paths"][r.DEPOSIT_GET.path]["get"]["parameters"] if p["in"] == "query"}
    assert (get["version"]["minimum"], get["version"]["maximum"], get["owner"]["maxLength"]) == (1, MAX_VERSION, MAX_OWNER_CHARS)
    entropy = spec["paths"][r.ENTROPY.path]["get"]["parameters"][0]
    assert entropy["required"] and entropy["schema"]["maximum"] == MAX_ENTROPY
    action = spec["paths"][r.CLIENT_STATUS.path]["post"]["parameters"][1]
    assert action["schema"]["enum"] == ["enable", "disable", "revoke"]
    put = spec["paths"][r.DEPOSIT_PUT.path]["put"]["requestBody"]["content"]["application/json"]["schema"]
    assert put == {"$ref": "#/components/schemas/PutRequest"} and "PolicyModel" in spec["components"]["schemas"]
    for route in TABLE:
        assert str(route.status) in spec["paths"][route.path][route.method.lower()]["responses"], route.key
    assert {(p, m) for p, ms in spec["paths"].items() for m in ms} == {(t.path, t.method.lower()) for t in TABLE}
