"""Malformed and hostile requests: always a 4xx with a JSON error body, never a 500 or a hang."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from strongroom.client import Client
from tests.server.shapes import deposit_error_keys
from tests.serverproc import Deployment, tls


def signed(
    c: Client, http: httpx.Client, method: str, path: str, content: bytes = b"", headers: dict[str, str] | None = None
) -> httpx.Request:
    """A request as httpx will send it, signed over its path and query exactly as they go out."""
    req = http.build_request(
        method, c.servers[0] + path, content=content, headers={"content-type": "application/json", **(headers or {})}
    )
    req.headers.update(c.signed_headers(method, req.url.raw_path.decode(), content))
    return req


def send(c: Client, method: str, path: str, content: bytes = b"", headers: dict[str, str] | None = None) -> httpx.Response:
    with httpx.Client(verify=tls(Path(str(c.ca_file)))) as http:
        return http.send(signed(c, http, method, path, content, headers))


def assert_json_error(r: httpx.Response, status: int | tuple[int, ...]) -> None:
    want = status if isinstance(status, tuple) else (status,)
    assert r.status_code in want, (r.status_code, r.text)
    body = r.json()
    assert deposit_error_keys(r.status_code, body) and body["message"]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[]",
        b'{"data": 5}',
        b'{"data": "YQ==", "unknown": 1}',
        b'{"data": "YQ==", "policy": {"max_retrievals": 0}}',
        b'{"data": "YQ==", "policy": {"max_retrievals": "5"}}',
        b'{"data": "YQ==", "policy": {"readers": "client:x"}}',
        b'{"data": "YQ==", "policy": {"expires_at": "tomorrow"}}',
        b'{"data": "not base64!"}',
        b"\xff\xfe",
        b"",
    ],
)
def test_malformed_put_bodies(running: Deployment, body: bytes) -> None:
    c = running.register()
    assert_json_error(send(c, "PUT", "/v1/deposits/k", body), (400, 422))
    assert c.list() == []


def test_times_must_be_finite_and_within_range(running: Deployment) -> None:
    """Times that gmtime cannot format, or SQLite would store as no time at all: 4xx on every
    route that takes one, nothing stored, and gets of what was stored before keep working."""
    c = running.register()
    c.put("kept", b"kept value")
    for field in ("expires_at", "not_before"):
        for value in ("1e20", "1e309", "-1e309", "Infinity", "-Infinity", "NaN", "-1", "253402300800"):
            policy = b'{"%s": %s}' % (field.encode(), value.encode())
            assert_json_error(send(c, "PUT", "/v1/deposits/k", b'{"data": "YQ==", "policy": %s}' % policy), (400, 422))
            assert_json_error(send(c, "PUT", "/v1/deposits/kept/policy", policy), (400, 422))
    event = (
        b'{"volume": "dm9s", "program": "/bin/x", "sha256": "%s", "uid": 0, "path_class": ".",'
        b' "write": false, "enforced": true, "count": 1, "first_at": FIRST, "last_at": 1}' % (b"0" * 64)
    )
    for value in (b"1e309", b"NaN", b"1e20"):
        body = b'{"acl_denials": [%s]}' % event.replace(b"FIRST", value)
        assert_json_error(send(c, "POST", "/v1/events", body), (400, 422))
    assert send(c, "POST", "/v1/events", b'{"acl_denials": [%s]}' % event.replace(b"FIRST", b"1")).status_code == 200
    assert [d["name"] for d in c.list()] == ["kept"]
    assert c.get("kept") == b"kept value"
    # the range's ends are accepted
    assert send(c, "PUT", "/v1/deposits/kept/policy", b'{"not_before": 0, "expires_at": 253402300799}').status_code == 200
    assert c.get("kept") == b"kept value"


@pytest.mark.parametrize("name", ["..", ".hidden", "a" * 129, "with space", "ünï", "%2e%2e", "a%2Fb"])
def test_bad_names(running: Deployment, name: str) -> None:
    c = running.register()
    r = send(c, "PUT", f"/v1/deposits/{name}", b'{"data": "YQ=="}')
    assert_json_error(r, (400, 404))


def test_bad_query_values(running: Deployment) -> None:
    c = running.register()
    c.put("k", b"v")
    for path in (
        "/v1/entropy?bytes=abc",
        "/v1/entropy",
        "/v1/entropy?bytes=99999999999999999999",
        "/v1/deposits/k?version=0",
        "/v1/deposits/k?version=-1",
        "/v1/deposits/k?owner=not-a-client",
        "/v1/admin/audit?limit=0",
    ):
        assert_json_error(send(c, "GET", path), (400, 403, 422))


def test_oversize_bodies(running: Deployment) -> None:
    c = running.register()
    huge = b'{"data": "' + b"A" * (3 << 20) + b'"}'
    assert_json_error(send(c, "PUT", "/v1/deposits/k", huge), 413)
    # a lying content-length with a chunked body is also cut off
    http = httpx.Client(verify=tls(running.data.ca_file))

    def gen():  # type: ignore[no-untyped-def]
        for _ in range(40):
            yield b"A" * (100 << 10)

    r = http.put(running.url + "/v1/deposits/k", content=gen())
    assert_json_error(r, 413)
    assert c.list() == []


def test_unknown_routes_and_methods(running: Deployment) -> None:
    http = httpx.Client(verify=tls(running.data.ca_file))
    assert_json_error(http.get(running.url + "/nope"), 404)
    assert_json_error(http.delete(running.url + "/health"), 405)
    c = running.register()
    assert_json_error(send(c, "POST", "/v1/admin/clients/c_AAAAAAAAAAAAAAAA/explode"), 404)


def test_register_bad_bodies(running: Deployment) -> None:
    http = httpx.Client(verify=tls(running.data.ca_file))
    for body in (
        b"{}",
        b'{"org": "default", "auth_secret": "x", "name": "n", "public_key": "short"}',
        b'{"org": "default", "auth_secret": "x", "name": "bad name", "public_key": "' + b"A" * 43 + b'"}',
        b'{"org": 1}',
        b"nope",
    ):
        assert_json_error(
            http.post(running.url + "/v1/register", content=body, headers={"content-type": "application/json"}), (400, 422)
        )


def test_one_path_whatever_the_query_string(running: Deployment) -> None:
    """Every request to a route takes the same pipeline (server/front.py): an unknown or repeated
    query parameter, a charset in the content type or a body where none belongs does not send
    it elsewhere; it is refused (422) or served alike, and the same way on every route."""
    c = running.register()
    c.put("k", b"value")
    got = send(c, "GET", "/v1/deposits/k")
    assert got.status_code == 200 and got.headers["content-type"] == "application/json"
    assert got.json() == {"name": "k", "owner": c.client_id, "version": 1, "data": "dmFsdWU="}
    refused = ("/v1/deposits/k?unrelated=1", "/v1/deposits/k?version=1&version=1", "/v1/whoami?x=", "/v1/deposits?o=1")
    for path in refused:
        r = send(c, "GET", path)
        assert_json_error(r, 422)
        assert "query parameter" in r.json()["message"]
    assert_json_error(send(c, "GET", "/v1/deposits/k", b'{"a": 1}'), 422)  # a body where none belongs
    for r in (send(c, "GET", "/v1/deposits/nope"), send(c, "GET", "/v1/deposits/nope?version=1")):
        assert r.status_code == 404 and r.json() == {"error": "not_found", "message": "no such deposit"}
    put = send(c, "PUT", "/v1/deposits/k", b'{"data": "YQ=="}')
    put_on = send(c, "PUT", "/v1/deposits/k", b'{"data": "YQ=="}', {"content-type": "application/json; charset=utf-8"})
    assert put.status_code == put_on.status_code == 201 and put.json()["version"] == 2 and put_on.json()["version"] == 3
    assert_json_error(send(c, "PUT", "/v1/deposits/k", b'{"data": "YQ=="}', {"content-type": "text/plain"}), 422)
    e = send(c, "GET", "/v1/entropy?bytes=48")
    assert e.status_code == 200 and len(e.content) == 48
    assert e.headers["content-type"] == "application/octet-stream" and e.headers["cache-control"] == "no-store"
    with httpx.Client(verify=tls(Path(str(c.ca_file)))) as http:
        replay = signed(c, http, "GET", "/v1/entropy?bytes=8")
        assert http.send(replay).status_code == 200
        assert_json_error(http.send(replay), 401)  # the same nonce again


def test_a_signature_header_given_twice_is_refused(running: Deployment) -> None:
    """One rule for every signed route, the Vault login's included: two copies of a signature
    header are refused (one layer could read the first and another the last), never resolved."""
    c = running.register()
    c.put("k", b"value")
    with httpx.Client(verify=tls(Path(str(c.ca_file)))) as http:
        for header in ("x-strongroom-client", "x-strongroom-timestamp", "x-strongroom-nonce", "x-strongroom-signature"):
            for method, path, body in (("GET", "/v1/deposits/k", b""), ("POST", "/v1/auth/strongroom/login", b"{}")):
                req = signed(c, http, method, path, body)
                raw = list(req.headers.raw)
                value = dict(raw)[header.encode()]
                req.headers = httpx.Headers([*raw, (header.encode(), value)])
                r = http.send(req)
                assert r.status_code == 401, (header, path, r.text)
                where = r.json()["errors"][0] if path.startswith("/v1/auth") else r.json()["message"]
                assert "more than once" in where, r.text


def test_a_nul_in_an_events_text_is_refused_and_the_batch_goes_on(running: Deployment) -> None:
    """An event's text goes into the audit chain: a NUL in it was a 503 for the whole group commit
    (found by the fuzz test); it is a 422 for that request alone."""
    c = running.register()
    c.put("kept", b"kept value")
    event = {"volume": "dm9s", "program": "/bin/x", "sha256": "0" * 64, "uid": 0, "path_class": "."}
    event |= {"write": False, "enforced": True, "count": 1, "first_at": 1, "last_at": 1}
    for field, value in (("volume", "\x00"), ("program", "/bin/\x00x"), ("path_class", "a\x00")):
        body = json.dumps({"acl_denials": [{**event, field: value}]}).encode()  # NUL written as \u0000
        assert_json_error(send(c, "POST", "/v1/events", body), 422)
    assert send(c, "POST", "/v1/events", json.dumps({"acl_denials": [event]}).encode()).status_code == 200
    assert c.get("kept") == b"kept value"
