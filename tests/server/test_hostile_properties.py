"""A property over every route of both APIs, read from their OpenAPI documents (issue 37, "How
it is checked"): whatever hostile value goes in any path part, query parameter, header or body
field -- digits outside ASCII, NUL, deep nesting, numbers no JSON parser holds, huge text --
the answer is a 4xx or a success in that API's shape, never a 5xx.  Requests are signed (or
carry a root-policy token) after the value is placed, so they reach the handlers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strongroom.client import Client
from tests.server.shapes import deposit_error_keys
from tests.serverproc import Deployment, tls

# Each is the text of a JSON value (placed in bodies as is) or, for paths, queries and headers,
# the string it holds.
TEXTS = ["²", "٣", "３", "1²", "٣٠٠", "-٣", "a\x00b", "\x00", "9" * 400, "-" + "9" * 400, "1e309", "", " ", "é" * 5_000]
JSONS = [
    "1e309",
    "-1e309",
    "NaN",
    "Infinity",
    "9" * 400,
    "1e-400",
    "-0.0",
    "18446744073709551616",
    '"\\u0000"',
    '"a\\u0000b"',
    '"²"',
    '"٣٠٠"',
    "[" * 1000 + "]" * 1000,
    '{"a":' * 1000 + "1" + "}" * 1000,
    "[" + ",".join(["0"] * 20_000) + "]",
    "null",
    "true",
    '"' + "x" * 100_000 + '"',
]
SIGNED_HEADERS = ["x-strongroom-timestamp", "x-strongroom-nonce", "x-strongroom-client", "x-strongroom-signature"]


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Client, Client, str, httpx.Client]]:
    d = Deployment(Path(tmp_path_factory.mktemp("hostile")), None)
    try:
        d.start(workers=1)
        user = d.register("hostile")
        user.put("existing", b"value")  # what the routes act on (a delete may take it)
        user.put("kept", b"kept value")  # what no route is pointed at: must come through unchanged
        token = user.vault_token(policies=["root"], ttl="2h")["client_token"]
        http = httpx.Client(verify=tls(d.data.ca_file), timeout=60)
        http.post(d.url + "/v1/secret/data/existing", json={"data": {"k": "v"}}, headers={"X-Vault-Token": token})
        http.post(d.url + "/v1/secret/data/kept-secret", json={"data": {"k": "v"}}, headers={"X-Vault-Token": token})
        http.post(d.url + "/v1/transit/keys/existing", json={}, headers={"X-Vault-Token": token})
        yield d, user, d.admin(), token, http
        http.close()
    finally:
        d.close()


def _operations(spec: dict[str, Any], skip: set[tuple[str, str]]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if (method.upper(), path) not in skip
    ]


def _fields(op: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """The body's top-level fields, from its schema (following one $ref)."""
    schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    ref = schema.get("$ref", "")
    if ref:
        schema = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return sorted(schema.get("properties", {}))


def _request(
    http: httpx.Client,
    base: str,
    method: str,
    path: str,
    op: dict[str, Any],
    spec: dict[str, Any],
    where: str,
    text: str,
    raw_json: str,
) -> httpx.Request:
    params = [p for p in op.get("parameters", []) if p["in"] == "path"]
    parts = {p["name"]: ("existing" if where != "path" else text) for p in params}
    url_path = re.sub(r"\{(\w+)\}", lambda m: quote(parts.get(m.group(1), "x"), safe="") or "x", path)
    query = {p["name"]: text for p in op.get("parameters", []) if p["in"] == "query" and where == "query"}
    body = b""
    fields = _fields(op, spec)
    if where == "body" and fields:
        body = ("{" + ",".join(f'"{f}":{raw_json}' for f in fields) + "}").encode()
    elif where == "whole-body":
        body = raw_json.encode()
    headers = {"content-type": "application/json"} if body else {}
    return http.build_request(method, base + url_path, params=query or None, content=body, headers=headers)


PLACES = ["path", "query", "body", "whole-body", "header"]


def _set_header(req: httpx.Request, name: str, text: str) -> None:
    """``text`` as the raw bytes of header ``name``: Latin-1 where it can be (the server reads
    header bytes as Latin-1, so "²" arrives as "²"), UTF-8 otherwise; what HTTP cannot carry -- a
    NUL, edge whitespace, nothing -- as an Arabic-Indic digit instead."""
    value = text.replace("\x00", "٣").strip() or "٣"
    try:
        raw_value = value.encode("latin-1")
    except UnicodeEncodeError:
        raw_value = value.encode("utf-8")
    raw = [(k, v) for k, v in req.headers.raw if k.lower() != name.lower().encode()]
    req.headers = httpx.Headers([*raw, (name.encode(), raw_value)])


def _cases(ops: list[Any], headers: list[str]) -> Iterator[tuple[Any, str, str, str, str]]:
    """Every operation with every hostile value in every place it can go."""
    for op in ops:
        for text in TEXTS:
            yield op, "path", text, "null", ""
            yield op, "query", text, "null", ""
            for header in headers:
                yield op, "header", text, "null", header
        for raw_json in JSONS:
            yield op, "body", "", raw_json, ""
            yield op, "whole-body", "", raw_json, ""


# Numbers as a hostile client could write them: any decimal digit of any script, signs, exponents.
NUMBERISH = st.text(
    alphabet=st.characters(categories=["Nd", "No"]) | st.sampled_from(list("0123456789-+.eE")), min_size=1, max_size=24
)


def _deposit_case(http: httpx.Client, d: Deployment, user: Client, admin: Client, spec: dict[str, Any], case: Any) -> int:
    (method, path, op), where, text, raw_json, header = case
    caller = admin if path.startswith("/v1/admin") or path == "/v1/unseal" else user
    req = _request(http, d.url, method, path, op, spec, where, text, raw_json)
    req.headers.update(caller.signed_headers(method, req.url.raw_path.decode(), req.content))
    if where == "header":
        _set_header(req, header, text)
    r = http.send(req)
    assert r.status_code < 500, (method, path, where, header, text[:40], raw_json[:40], r.status_code, r.text[:300])
    if r.status_code >= 400:
        assert deposit_error_keys(r.status_code, r.json()), r.text[:300]
    return r.status_code


def _vault_case(http: httpx.Client, d: Deployment, user: Client, token: str, spec: dict[str, Any], case: Any) -> int:
    (method, path, op), where, text, raw_json, header = case
    req = _request(http, d.url, method, path, op, spec, where, text, raw_json)
    req.headers["X-Vault-Token"] = token
    if path.startswith("/v1/auth/strongroom/login"):
        req.headers.update(user.signed_headers(method, req.url.raw_path.decode(), req.content))
    if where == "header":
        _set_header(req, header, text)
    r = http.send(req)
    sealed = r.status_code == 503 and "sealed" in r.text
    assert r.status_code < 500 or sealed, (method, path, where, header, text[:40], raw_json[:40], r.status_code, r.text[:300])
    if r.status_code >= 400:
        body = r.json()
        assert "errors" in body or "batch_results" in (body.get("data") or {}), r.text[:300]
    return r.status_code


def test_the_deposit_api_answers_every_hostile_value_with_a_4xx(target: Any) -> None:
    d, user, admin, _token, http = target
    spec = http.get(d.url + "/openapi.json").json()
    ops = _operations(spec, {("POST", "/v1/admin/seal")})  # sealing is a deliberate 503 for what follows
    statuses = [_deposit_case(http, d, user, admin, spec, case) for case in _cases(ops, SIGNED_HEADERS)]

    @settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(ops), st.sampled_from(["path", "query", "header"]), NUMBERISH, st.sampled_from(SIGNED_HEADERS))
    def numbers(op: Any, where: str, text: str, header: str) -> None:
        statuses.append(_deposit_case(http, d, user, admin, spec, (op, where, text, "null", header)))

    numbers()
    assert len(statuses) > 2000 and any(s < 300 for s in statuses) and 422 in statuses and 401 in statuses
    assert user.get("kept") == b"kept value"
    assert d.servers[0].wait_healthy()["sealed"] is False


def test_the_vault_api_answers_every_hostile_value_with_a_4xx(target: Any) -> None:
    d, user, _admin, token, http = target
    spec = http.get(d.url + "/v1/sys/internal/specs/openapi", headers={"X-Vault-Token": token}).json()
    ops = _operations(spec, {("POST", "/v1/auth/token/revoke-self")})  # would end the test's own token
    headers = ["X-Vault-Token", "X-Vault-Request", "X-Vault-Wrap-TTL", *SIGNED_HEADERS]
    statuses = [_vault_case(http, d, user, token, spec, case) for case in _cases(ops, headers)]

    @settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(ops), st.sampled_from(["path", "query"]), NUMBERISH)
    def numbers(op: Any, where: str, text: str) -> None:
        statuses.append(_vault_case(http, d, user, token, spec, (op, where, text, "null", "")))

    numbers()
    assert len(statuses) > 2000 and any(s < 300 for s in statuses) and 400 in statuses
    got = http.get(d.url + "/v1/secret/data/kept-secret", headers={"X-Vault-Token": token})
    assert got.status_code == 200 and got.json()["data"]["data"] == {"k": "v"}
