"""What a client's login with policies ["root"] grants (issue 37, point 16; API.md, Tokens): every
capability over that client's own secrets, keys and tokens, and nothing beyond it -- no other
client's secret or key is reachable, and policies, which apply to every client, stay the admin
credential's.  Two registered clients on a real server."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx

from tests.server.test_bad_input import send
from tests.serverproc import Deployment, tls


def _root_token(c: object) -> str:
    r = send(c, "POST", "/v1/auth/strongroom/login", json.dumps({"policies": ["root"]}).encode())  # type: ignore[arg-type]
    assert r.status_code == 200, r.text
    return str(r.json()["auth"]["client_token"])


def test_a_clients_root_token_reaches_its_own_namespace_only(running: Deployment) -> None:
    a, b = running.register("root-a"), running.register("root-b")
    ta, tb = _root_token(a), _root_token(b)
    with httpx.Client(base_url=running.servers[0].url, verify=tls(Path(str(a.ca_file)))) as http:

        def call(method: str, path: str, token: str, body: object = None) -> httpx.Response:
            return http.request(method, "/v1/" + path, headers={"X-Vault-Token": token}, json=body)

        # b's own secret and key
        assert call("POST", "secret/data/shared", tb, {"data": {"owner": "b"}}).status_code == 200
        assert call("POST", "transit/keys/bkey", tb).status_code in (200, 204)
        # a's root token: everything over a's own things
        assert call("POST", "secret/data/mine", ta, {"data": {"owner": "a"}}).status_code == 200
        assert call("POST", "secret/metadata/mine", ta, {"max_versions": 3}).status_code == 204
        assert call("POST", "transit/keys/akey", ta).status_code in (200, 204)
        plain = base64.b64encode(b"x").decode()
        assert call("POST", "transit/encrypt/akey", ta, {"plaintext": plain}).status_code == 200
        child = call("POST", "auth/token/create", ta, {"policies": ["root"], "ttl": "5m"})
        assert child.status_code == 200
        # and nothing of b's: the same names are a's own (empty) namespace
        assert call("GET", "secret/data/shared", ta).status_code == 404
        listed = call("LIST", "secret/metadata/", ta).json().get("data", {}).get("keys", [])
        assert "shared" not in listed and "mine" in listed
        assert call("GET", "transit/keys/bkey", ta).status_code == 404
        assert call("POST", "transit/encrypt/bkey", ta, {"plaintext": plain}).json()["data"]["ciphertext"]  # a's new key
        assert call("GET", "secret/data/shared", tb).json()["data"]["data"] == {"owner": "b"}  # b's untouched
        # policies apply to every client's tokens: the admin credential's alone
        r = call("POST", "sys/policies/acl/grab", ta, {"policy": 'path "*" { capabilities = ["read"] }'})
        assert r.status_code == 403
        assert call("DELETE", "sys/policy/default", ta).status_code in (400, 403)
