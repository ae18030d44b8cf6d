"""Durability under SIGKILL, exact counts under concurrency, several processes on one database, outages."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from strongroom.client import Client, Gone, Unavailable
from strongroom.client.errors import InvalidRequest
from tests.pg import PgCluster
from tests.serverproc import Deployment, tls


def test_acknowledged_puts_survive_sigkill(deployment: Deployment) -> None:
    server = deployment.start(workers=2)
    c = deployment.register()
    acked: list[tuple[str, bytes]] = []
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            value = f"value-{i}".encode() * 10
            try:
                c.put(f"k{i}", value)
            except Unavailable:
                return
            acked.append((f"k{i}", value))
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(1.5)
    server.kill()  # SIGKILL the whole process tree mid-stream
    stop.set()
    t.join(30)
    assert len(acked) > 5
    deployment.start()
    c2 = Client([deployment.servers[-1].url], c.client_id, c._identity, deployment.data.ca_file)
    for name, value in acked:
        assert c2.get(name) == value


def test_exact_retrieval_count_two_processes(pg_deployment: Deployment) -> None:
    d = pg_deployment
    s1, s2 = d.start(workers=2), d.start(workers=2)
    owner = d.register("owner", server=s1)
    admin = d.admin(s1)
    admin.create_group("default", "racers")
    racers = [d.register(f"racer{i}", server=(s1 if i % 2 else s2)) for i in range(16)]
    admin.change_group("default", "racers", add=[r.client_id for r in racers])
    owner.put("limited", b"five times only", readers=["group:racers"], max_retrievals=5)
    barrier = threading.Barrier(16)

    def race(c: Client) -> str:
        barrier.wait()
        try:
            assert c.get("limited", owner=owner.client_id) == b"five times only"
            return "ok"
        except Gone:
            return "gone"

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(race, racers))
    assert results.count("ok") == 5 and results.count("gone") == 11
    assert owner.list()[0]["retrievals"] == 5


def test_two_processes_share_data_and_nonces(pg_deployment: Deployment) -> None:
    d = pg_deployment
    s1, s2 = d.start(), d.start()
    c = d.register(server=s1)
    c.put("shared", b"through s1")
    via_s2 = Client([s2.url], c.client_id, c._identity, d.data.ca_file)
    assert via_s2.get("shared") == b"through s1"
    via_s2.put("shared", b"through s2")
    assert c.get("shared") == b"through s2"
    # one signed request replayed against the other process is refused
    req = httpx.Request("GET", s1.url + "/v1/whoami", headers=c.signed_headers("GET", "/v1/whoami", b""))
    http = httpx.Client(verify=tls(d.data.ca_file))
    assert http.send(req).status_code == 200
    req.url = httpx.URL(s2.url + "/v1/whoami")
    r = http.send(req)
    assert r.status_code == 401 and "replay" in r.json()["message"]
    # revocation through one process holds in the other at once
    d.admin(s1).set_client_status(c.client_id, "revoke")
    with pytest.raises(Exception, match="revoked"):
        via_s2.get("shared")


def test_database_outage_answers_503_and_recovers(tmp_path: Path) -> None:
    cluster = PgCluster()
    try:
        d = Deployment(tmp_path, cluster.create_database("outage"))
        d.start()
        c = d.register()
        c.put("k", b"v")
        cluster.stop()
        t0 = time.time()
        with pytest.raises(Unavailable, match="database unavailable"):
            c.get("k")
        assert time.time() - t0 < 15
        health = httpx.get(d.url + "/health", verify=tls(d.data.ca_file))
        assert health.status_code == 200
        cluster.start()
        deadline = time.time() + 30
        while True:
            try:
                assert c.get("k") == b"v"
                break
            except Unavailable:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        d.close()
    finally:
        cluster.destroy()


def _wrong_registrations(d: Deployment, urls: list[str], tmp_path: Path, n: int) -> list[int]:
    """Status codes of ``n`` registrations with a wrong secret, spread over ``urls`` (each a new
    connection, so a multi-worker server hands them to different workers)."""
    codes = []
    for i in range(n):
        body = {"org": d.org, "auth_secret": "wrong", "name": f"w{i}", "public_key": "A" * 43}
        r = httpx.post(urls[i % len(urls)] + "/v1/register", json=body, verify=tls(d.data.ca_file), timeout=10)
        codes.append(r.status_code)
    return codes


def test_registration_failures_are_counted_across_workers(deployment: Deployment, tmp_path: Path) -> None:
    s = deployment.start(workers=2)
    codes = _wrong_registrations(deployment, [s.url], tmp_path, 12)
    assert codes == [401] * 10 + [429] * 2, codes


def test_registration_failures_are_counted_across_servers(pg_deployment: Deployment, tmp_path: Path) -> None:
    s1, s2 = pg_deployment.start(), pg_deployment.start()
    codes = _wrong_registrations(pg_deployment, [s1.url, s2.url], tmp_path, 12)
    assert codes == [401] * 10 + [429] * 2, codes
    # the right secret from the same address waits out the minute too, on either server
    with pytest.raises(InvalidRequest, match="too many"):
        pg_deployment.register(server=s2)
