"""Fuzz the API from its own OpenAPI schema (schemathesis), signing every request so most cases get
past authentication: no answer may be a 5xx, every error must be the JSON error body."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core import NotSet

from strongroom.client import Client
from tests.server.shapes import deposit_error_keys
from tests.serverproc import Deployment, tls

# Sealing is a deliberate 503 for everything after it; it has its own tests.
SKIP = {("POST", "/v1/admin/seal")}


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = Deployment(Path(tmp_path_factory.mktemp("fuzz")), None)
    d.start(workers=1)
    user = d.register("fuzzer")
    user.put("existing", b"value")
    spec = httpx.get(d.url + "/openapi.json", verify=tls(d.data.ca_file)).json()
    yield d, user, d.admin(), spec
    d.close()


_HTTP: dict[str, httpx.Client] = {}


def _send(client: Client, case: Any) -> httpx.Response:
    if isinstance(case.body, NotSet):
        body = b""
    elif isinstance(case.body, bytes | bytearray):
        body = bytes(case.body)
    else:
        body = json.dumps(case.body, default=lambda o: o.decode("latin-1") if isinstance(o, bytes) else str(o)).encode()
    headers = {"content-type": "application/json"} if body else {}
    http = _HTTP.get(client.servers[0])
    if http is None:  # one kept-alive connection per server, as the client's own
        http = _HTTP[client.servers[0]] = httpx.Client(verify=tls(Path(str(client.ca_file))))
    req = http.build_request(
        case.method, client.servers[0] + case.formatted_path, params=case.query or None, content=body, headers=headers
    )
    # signed over the path and query exactly as httpx sends them
    req.headers.update(client.signed_headers(case.method, req.url.raw_path.decode(), body))
    return http.send(req)


def _fuzz_operation(op: Any, mode: GenerationMode, caller: Client, seen: list[int]) -> None:
    @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(op.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        r = _send(caller, case)
        seen.append(r.status_code)
        assert r.status_code < 500, (case.method, case.formatted_path, case.query, case.body, r.status_code, r.text)
        if r.status_code >= 400:
            assert deposit_error_keys(r.status_code, r.json()), r.text

    run()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors(fuzz_target: Any, mode: GenerationMode) -> None:
    d, user, admin, spec = fuzz_target
    schema = schemathesis.openapi.from_dict(spec)
    seen: list[int] = []
    fuzzed = 0
    for result in schema.get_all_operations():
        op = result.ok()
        if (op.method.upper(), op.path) in SKIP:
            continue
        caller = admin if op.path.startswith("/v1/admin") or op.path == "/v1/unseal" else user
        try:
            _fuzz_operation(op, mode, caller, seen)
            fuzzed += 1
        except Unsatisfiable:
            # Some operations have no invalid variant (no parameters, or only free-form strings).
            assert mode == GenerationMode.NEGATIVE, op.label
    assert fuzzed >= (20 if mode == GenerationMode.POSITIVE else 8), fuzzed
    assert len(seen) > 150
    assert any(s < 300 for s in seen)  # signing worked: cases got past authentication
    assert d.servers[0].wait_healthy()["sealed"] is False
    assert user.get("existing") == b"value"  # nothing the fuzzer sent damaged real data


SPECIAL_NUMBERS = ("1e20", "1e309", "-1e309", "Infinity", "-Infinity", "NaN", "-0.0", "1e-400", "9" * 400)


def _number_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _number_paths(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _number_paths(v, (*path, i))]
    return []


def _with_token(body: Any, path: tuple[Any, ...], token: str) -> bytes:
    """``body`` as JSON text with the number at ``path`` written as ``token`` (which json.dumps
    could not write: 1e309, NaN)."""
    copy = json.loads(json.dumps(body, default=str))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = "\x00number\x00"
    return json.dumps(copy, default=str).replace('"\\u0000number\\u0000"', token).encode()


def _numbers_operation(op: Any, caller: Client, tried: list[int]) -> None:
    @settings(max_examples=5, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(op.as_strategy(generation_mode=GenerationMode.POSITIVE))
    def run(case: Any) -> None:
        if isinstance(case.body, NotSet):
            return
        http = _HTTP.setdefault(caller.servers[0], httpx.Client(verify=tls(Path(str(caller.ca_file)))))
        for path in _number_paths(case.body):
            for token in SPECIAL_NUMBERS:
                body = _with_token(case.body, path, token)
                req = http.build_request(
                    case.method,
                    caller.servers[0] + case.formatted_path,
                    params=case.query or None,
                    content=body,
                    headers={"content-type": "application/json"},
                )
                req.headers.update(caller.signed_headers(case.method, req.url.raw_path.decode(), body))
                r = http.send(req)
                tried.append(r.status_code)
                assert r.status_code < 500, (case.formatted_path, body[:300], r.status_code, r.text)
                if r.status_code >= 400:
                    assert deposit_error_keys(r.status_code, r.json()), r.text

    run()


def test_no_server_errors_for_numbers_json_cannot_hold(fuzz_target: Any) -> None:
    """Every number in valid bodies of every route, replaced by values a JSON parser may turn into
    inf, nan or an overflow: a 4xx in the error shape or a success, never a 5xx."""
    d, user, admin, spec = fuzz_target
    schema = schemathesis.openapi.from_dict(spec)
    tried: list[int] = []
    for result in schema.get_all_operations():
        op = result.ok()
        if (op.method.upper(), op.path) in SKIP or op.method.upper() not in ("POST", "PUT"):
            continue
        caller = admin if op.path.startswith("/v1/admin") or op.path == "/v1/unseal" else user
        _numbers_operation(op, caller, tried)
    assert len(tried) > 50 and any(s >= 400 for s in tried), len(tried)
    assert d.servers[0].wait_healthy()["sealed"] is False
    assert user.get("existing") == b"value"
    # whatever was accepted is stored so that reading it back answers (a time that overflowed
    # on the way out made every get of its deposit a 500)
    http = _HTTP.setdefault(user.servers[0], httpx.Client(verify=tls(Path(str(user.ca_file)))))
    for dep in user.list():
        path = f"/v1/deposits/{dep['name']}"
        r = http.get(user.servers[0] + path, headers=user.signed_headers("GET", path, b""))
        assert r.status_code < 500, (dep, r.text)
