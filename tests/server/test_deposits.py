"""Deposits, versions, listing and entropy through a real server over TLS, on SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
import pytest

from strongroom.client import NotFound
from strongroom.client.errors import InvalidRequest
from tests.serverproc import Deployment, tls


def test_put_get_versions_list_delete(running: Deployment) -> None:
    c = running.register("alpha")
    assert c.put("db-key", b"\x00first") == 1
    assert c.put("db-key", b"second") == 2
    assert c.get("db-key") == b"second"
    assert c.get("db-key", version=1) == b"\x00first"
    with pytest.raises(NotFound):
        c.get("db-key", version=3)
    listing = c.list()
    assert [(d["name"], d["latest_version"], d["retrievals"]) for d in listing] == [("db-key", 2, 2)]
    c.delete("db-key")
    with pytest.raises(NotFound):
        c.get("db-key")
    assert c.list() == []
    with pytest.raises(NotFound):
        c.delete("db-key")


def test_empty_and_binary_and_limit_sized_deposits(running: Deployment) -> None:
    c = running.register()
    blob = bytes(range(256)) * 4096  # exactly 1 MiB: the default limit
    assert c.put("big", blob) == 1
    assert c.get("big") == blob
    c.put("empty", b"")
    assert c.get("empty") == b""
    with pytest.raises(InvalidRequest, match="limit"):
        c.put("too-big", blob + b"x")


def test_names_are_per_owner(running: Deployment) -> None:
    a, b = running.register("a"), running.register("b")
    a.put("same", b"from a")
    b.put("same", b"from b")
    assert a.get("same") == b"from a"
    assert b.get("same") == b"from b"


def test_entropy_sizes_and_bounds(running: Deployment) -> None:
    c = running.register()
    for n in (1, 32, 1000, 65536):
        assert len(c.entropy(n)) == n
    assert c.entropy(32) != c.entropy(32)
    for n in (0, 65537, -1):
        with pytest.raises(InvalidRequest):
            c.entropy(n)


def test_health_metrics_openapi(running: Deployment) -> None:
    c = running.register()
    c.put("x", b"1")
    ca = tls(running.data.ca_file)
    h = httpx.get(running.url + "/health", verify=ca).json()
    assert h == {"status": "ok", "sealed": False}
    m = httpx.get(running.url + "/metrics", verify=ca).text
    assert 'strongroom_requests_total{method="PUT",route="/v1/deposits/{name}",status="201"} 1.0' in m
    assert "strongroom_request_seconds_bucket" in m
    assert "strongroom_sealed 0.0" in m
    batches = float(m.split("\nstrongroom_commit_batches ")[1].split()[0])
    actions = float(m.split("\nstrongroom_commit_actions ")[1].split()[0])
    assert actions >= batches >= 1  # this process committed at least the register or the put
    spec = httpx.get(running.url + "/openapi.json", verify=ca).json()
    assert "/v1/deposits/{name}" in spec["paths"]
    assert "/v1/entropy" in spec["paths"]


def test_plain_http_is_refused(running: Deployment) -> None:
    with pytest.raises(httpx.HTTPError):
        httpx.get(running.url.replace("https://", "http://") + "/health", timeout=3)


def test_tls_versions(running: Deployment) -> None:
    import socket
    import ssl

    host, port = running.url.removeprefix("https://").rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(running.data.ca_file))
    with socket.create_connection((host, int(port))) as s, ctx.wrap_socket(s, server_hostname=host) as t:
        assert t.version() == "TLSv1.3"
    old = ssl.create_default_context(cafile=str(running.data.ca_file))
    old.maximum_version = ssl.TLSVersion.TLSv1_1  # what the server must refuse
    with pytest.raises(ssl.SSLError), socket.create_connection((host, int(port))) as s, old.wrap_socket(s, server_hostname=host):
        pass
