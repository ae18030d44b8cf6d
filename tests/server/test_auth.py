"""Request signing, replay and clock checks, client status, organizations and registration."""

from __future__ import annotations

import time

import httpx
import pytest

from strongroom.client import Client, Denied
from strongroom.client.errors import InvalidRequest
from strongroom.crypto import reqsig
from strongroom.crypto.identity import Identity, b64u
from strongroom.server import storage
from tests.serverproc import Deployment, tls


def _signed(c: Client, method: str, path: str, ts: int | None = None) -> httpx.Request:
    req = httpx.Request(method, c.servers[0] + path, headers=c.signed_headers(method, path, b""))
    if ts is not None:  # re-sign with a chosen timestamp
        raw_path, _, query = req.url.raw_path.decode().partition("?")
        nonce = req.headers[reqsig.HEADER_NONCE]
        msg = reqsig.string_to_sign(method, raw_path, query, b"", str(ts), nonce, c.client_id)
        req.headers[reqsig.HEADER_TIME] = str(ts)
        req.headers[reqsig.HEADER_SIG] = b64u(c._identity.sign(msg))
    return req


def test_unsigned_bad_signature_and_replay(running: Deployment) -> None:
    c = running.register()
    http = httpx.Client(verify=tls(running.data.ca_file))
    r = http.get(running.url + "/v1/whoami")
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    req = _signed(c, "GET", "/v1/whoami")
    assert http.send(req).status_code == 200
    replay = http.send(req)
    assert replay.status_code == 401 and "replay" in replay.json()["message"]
    forged = _signed(c, "GET", "/v1/whoami")
    forged.headers[reqsig.HEADER_SIG] = b64u(Identity.generate().sign(b"x"))
    assert http.send(forged).status_code == 401
    # a signature over one path does not authorize another
    moved = _signed(c, "GET", "/v1/whoami")
    moved.url = moved.url.copy_with(path="/v1/deposits")
    assert http.send(moved).status_code == 401
    for garbage in ("", "!!", "c_short", "x" * 500):
        bad = _signed(c, "GET", "/v1/whoami")
        bad.headers[reqsig.HEADER_CLIENT] = garbage
        assert http.send(bad).status_code == 401


def test_timestamp_window(running: Deployment) -> None:
    c = running.register()
    http = httpx.Client(verify=tls(running.data.ca_file))
    for skew in (-400, 400):
        r = http.send(_signed(c, "GET", "/v1/whoami", ts=int(time.time()) + skew))
        assert r.status_code == 401 and "5 minutes" in r.json()["message"]
    assert http.send(_signed(c, "GET", "/v1/whoami", ts=int(time.time()) - 200)).status_code == 200


def test_body_is_covered_by_signature(running: Deployment) -> None:
    c = running.register()
    http = httpx.Client(verify=tls(running.data.ca_file))
    body = b'{"data":"YQ=="}'
    headers = {"content-type": "application/json", **c.signed_headers("PUT", "/v1/deposits/k", body)}
    req = httpx.Request("PUT", c.servers[0] + "/v1/deposits/k", content=body, headers=headers)
    tampered = httpx.Request("PUT", req.url, content=b'{"data":"Yg=="}', headers=dict(req.headers))
    assert http.send(tampered).status_code == 401
    assert http.send(req).status_code == 201


def test_disable_enable_revoke(running: Deployment) -> None:
    admin = running.admin()
    c = running.register()
    c.put("k", b"v")
    admin.set_client_status(c.client_id, "disable")
    with pytest.raises(Denied, match="disabled"):
        c.get("k")
    admin.set_client_status(c.client_id, "enable")
    assert c.get("k") == b"v"
    admin.set_client_status(c.client_id, "revoke")
    with pytest.raises(Denied, match="revoked"):
        c.get("k")
    with pytest.raises(InvalidRequest, match="stays revoked"):
        admin.set_client_status(c.client_id, "enable")
    statuses = {x["client_id"]: x["status"] for x in admin.list_clients()}
    assert statuses[c.client_id] == "revoked"
    actions = [e["action"] for e in admin.audit_tail(-1, 1000)]
    assert {"client.disable", "client.enable", "client.revoke"} <= set(actions)


def test_registration_wrong_secret_is_rate_limited_and_audited(running: Deployment, tmp_path) -> None:
    with pytest.raises(Denied, match="wrong organization or auth secret"):
        Client.register([running.url], "no-such-org", running.secret, "x", tmp_path / "x", running.data.ca_file)
    for i in range(9):
        with pytest.raises(Denied, match="wrong organization or auth secret"):
            Client.register([running.url], running.org, "wrong", f"h{i}", tmp_path / f"p{i}", running.data.ca_file)
    with pytest.raises(InvalidRequest, match="too many"):
        Client.register([running.url], running.org, running.secret, "late", tmp_path / "late", running.data.ca_file)
    denied = [e for e in running.admin().audit_tail(-1, 1000) if e["action"] == "register" and e["outcome"] == "denied"]
    assert len(denied) == 10
    assert all("wrong" not in str(e["detail"].get("secret", "")) for e in denied)


def test_orgs_and_secret_rotation(running: Deployment, tmp_path) -> None:
    admin = running.admin()
    created = admin.create_org("finance")
    with pytest.raises(InvalidRequest):
        admin.create_org("finance")
    c = Client.register([running.url], "finance", created["auth_secret"], "fin1", tmp_path / "a", running.data.ca_file)
    assert c.whoami()["org"] == "finance"
    rotated = admin.rotate_org_secret("finance")
    with pytest.raises(Denied):
        Client.register([running.url], "finance", created["auth_secret"], "fin2", tmp_path / "b", running.data.ca_file)
    Client.register([running.url], "finance", rotated["auth_secret"], "fin3", tmp_path / "c", running.data.ca_file)
    names = {o["name"]: o["clients"] for o in admin.list_orgs()}
    assert names["finance"] == 2
    # clients of another organization cannot be named as readers
    other = running.register()
    with pytest.raises(InvalidRequest):
        other.put("k", b"v", readers=[f"client:{c.client_id}"])


def test_profile_is_private_and_holds_only_the_private_key_locally(running: Deployment) -> None:
    c = running.register("private")
    prof = running.root / "profiles" / "private"
    for f in ("profile.json", "identity.key", "ca.pem"):
        assert (prof / f).stat().st_mode & 0o077 == 0
    assert (prof).stat().st_mode & 0o077 == 0
    assert c.whoami()["name"] == "private"


def test_failover_to_next_server(running: Deployment, tmp_path) -> None:
    from tests.pg import free_port

    dead = f"https://127.0.0.1:{free_port()}"
    c = running.register("fo", urls=[dead, running.url])
    c.put("k", b"v")
    assert c.get("k") == b"v"


def test_replay_caught_on_a_hot_route_whatever_the_nonce_format(running: Deployment) -> None:
    """The replay table is keyed by (timestamp, nonce, client): a replay repeats all three, since
    the timestamp is signed; a nonce need not start with the time (ours do, for index locality)."""
    c = running.register()
    c.put("k", b"value")
    http = httpx.Client(verify=tls(running.data.ca_file))
    for nonce in (b64u(b"\x00" * 12), "Z" * 64, c.signed_headers("GET", "/", b"")[reqsig.HEADER_NONCE]):
        ts = str(int(time.time()))
        msg = reqsig.string_to_sign("GET", "/v1/deposits/k", "", b"", ts, nonce, c.client_id)
        headers = {
            reqsig.HEADER_CLIENT: c.client_id,
            reqsig.HEADER_TIME: ts,
            reqsig.HEADER_NONCE: nonce,
            reqsig.HEADER_SIG: b64u(c._identity.sign(msg)),
        }
        first = http.get(running.url + "/v1/deposits/k", headers=headers)
        assert first.status_code == 200, first.text
        again = http.get(running.url + "/v1/deposits/k", headers=headers)
        assert again.status_code == 401 and "replay" in again.json()["message"]
    assert c.list()[0]["retrievals"] == 3  # the refused replays retrieved nothing


def test_replay_table_of_an_earlier_version_is_upgraded_without_losing_a_nonce(deployment: Deployment) -> None:
    """A database made before the (timestamp, nonce, client) table: the server moves what the old
    (client, nonce, expires) table remembered at start, so a request seen before still replays."""
    s = deployment.start()
    c = deployment.register()
    seen = httpx.Request("GET", s.url + "/v1/whoami", headers=c.signed_headers("GET", "/v1/whoami", b""))
    s.stop()
    store = storage.Store(deployment.db_url)
    try:
        with store.exclusive() as tx:  # the old schema, holding the request above as seen
            tx.run("DROP TABLE seen_nonces")
            tx.run("DROP TABLE registration_failures")  # an earlier version had neither
            tx.run("DELETE FROM meta WHERE key = 'schema_version'")  # nor a recorded schema version
            tx.run(
                "CREATE TABLE nonces (client_id VARCHAR(32), nonce VARCHAR(64), expires FLOAT, PRIMARY KEY (client_id, nonce))"
            )
            tx.run(
                "INSERT INTO nonces (client_id, nonce, expires) VALUES (?, ?, ?)",
                c.client_id,
                seen.headers[reqsig.HEADER_NONCE],
                int(seen.headers[reqsig.HEADER_TIME]) + 2 * reqsig.MAX_SKEW_SECONDS,
            )
    finally:
        store.dispose()
    s2 = deployment.start()
    http = httpx.Client(verify=tls(deployment.data.ca_file))
    seen.url = httpx.URL(s2.url + "/v1/whoami")
    r = http.send(seen)
    assert r.status_code == 401 and "replay" in r.json()["message"]
    fresh = httpx.Request("GET", s2.url + "/v1/whoami", headers=c.signed_headers("GET", "/v1/whoami", b""))
    assert http.send(fresh).status_code == 200
    body = {"org": deployment.org, "auth_secret": "wrong", "name": "w", "public_key": "A" * 43}
    assert http.post(s2.url + "/v1/register", json=body).status_code == 401  # counted in the new table
    store = storage.Store(deployment.db_url)
    try:
        with store.exclusive() as tx:
            assert tx.value("SELECT COUNT(*) FROM seen_nonces") >= 2
            assert tx.value("SELECT COUNT(*) FROM registration_failures") == 1
        from sqlalchemy import inspect

        assert "nonces" not in inspect(store.engine).get_table_names()
    finally:
        store.dispose()
