"""Fuzz the Vault-compatible routes from their own OpenAPI description (schemathesis), with a
valid root-policy token so the cases reach the handlers: no answer may be a 5xx, every error is
Vault's ``{"errors": [...]}``.  Then the malformed inputs Vault's clients can send, one by one."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.core import NotSet

from tests.serverproc import Deployment, tls


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, httpx.Client]]:
    d = Deployment(Path(tmp_path_factory.mktemp("vfuzz")), None)
    try:
        d.start(workers=1)
        token = d.register("fuzzer").vault_token(policies=["root"], ttl="2h")["client_token"]
        http = httpx.Client(base_url=d.url, verify=tls(d.data.ca_file), headers={"X-Vault-Token": token}, timeout=30)
        http.post("/v1/secret/data/existing", json={"data": {"k": "v"}}).raise_for_status()
        http.post("/v1/transit/keys/existing", json={}).raise_for_status()
        http.post("/v1/transit/keys/signer", json={"type": "ed25519"}).raise_for_status()
        yield d.url, token, http
        http.close()
    finally:
        d.close()


def _body(case: Any) -> bytes:
    if isinstance(case.body, NotSet):
        return b""
    if isinstance(case.body, bytes | bytearray):
        return bytes(case.body)
    return json.dumps(case.body, default=str).encode()


def _check(r: httpx.Response, what: Any) -> None:
    assert r.status_code < 500, (what, r.status_code, r.text)
    if r.status_code >= 400:
        body = r.json()
        assert set(body) <= {
            "errors",
            "data",
            "request_id",
            "lease_id",
            "renewable",
            "lease_duration",
            "wrap_info",
            "warnings",
            "auth",
        }
        assert "errors" in body or "batch_results" in (body.get("data") or {}), r.text


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors(vault: tuple[str, str, httpx.Client], mode: GenerationMode) -> None:
    url, token, http = vault
    spec = http.get("/v1/sys/internal/specs/openapi").json()
    schema = schemathesis.openapi.from_dict(spec)
    operations = 0
    for result in schema.get_all_operations():
        op = result.ok()
        if op.path in ("/v1/auth/token/revoke-self",):  # would end the fuzzer's own token
            continue
        operations += 1

        @settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(op.as_strategy(generation_mode=mode))
        def run(case: Any) -> None:
            body = _body(case)
            headers = {"content-type": "application/json"} if body else {}
            r = http.request(case.method, case.formatted_path, params=case.query or None, content=body, headers=headers)
            _check(r, (case.method, case.formatted_path, case.query, case.body))

        try:
            run()
        except Exception as e:
            if "Unsatisfiable" in type(e).__name__:
                continue
            raise
    assert operations >= 40  # the description covers the table


B64 = base64.b64encode(b"x" * 32).decode()
MALFORMED = [
    ("POST", "transit/decrypt/existing", {"ciphertext": "vault:v1:"}),
    ("POST", "transit/decrypt/existing", {"ciphertext": "vault:v1:%%%%"}),
    ("POST", "transit/decrypt/existing", {"ciphertext": "vault:vX:AAAA"}),
    ("POST", "transit/decrypt/existing", {"ciphertext": "vault:v99999999999:AAAA"}),
    ("POST", "transit/decrypt/existing", {"ciphertext": "vault:v0:" + B64}),
    ("POST", "transit/decrypt/existing", {"ciphertext": "vault:v2:" + B64}),
    ("POST", "transit/decrypt/existing", {"ciphertext": 7}),
    ("POST", "transit/decrypt/existing", {"ciphertext": "vault:v1:" + B64, "context": "not base64!"}),
    ("POST", "transit/encrypt/existing", {"plaintext": "not base64!"}),
    ("POST", "transit/encrypt/existing", {"plaintext": B64, "key_version": 5}),
    ("POST", "transit/encrypt/existing", {"plaintext": B64, "key_version": "x"}),
    ("POST", "transit/encrypt/existing", {"batch_input": [{"plaintext": B64}] * 4097}),
    ("POST", "transit/encrypt/existing", {"batch_input": "nope"}),
    ("POST", "transit/encrypt/existing", {"batch_input": [1, 2]}),
    ("POST", "transit/encrypt/signer", {"plaintext": B64}),
    ("POST", "transit/verify/signer", {"input": B64, "signature": "vault:v9:AAAA"}),
    ("POST", "transit/sign/existing", {"input": B64}),
    ("POST", "transit/hmac/existing/md4", {"input": B64}),
    ("POST", "transit/datakey/both/existing", {}),
    ("POST", "transit/datakey/plaintext/existing", {"bits": 100}),
    ("POST", "transit/random/99999999", {}),
    ("POST", "transit/keys/new", {"type": "rsa-4096"}),
    ("POST", "transit/keys/new", {"exportable": True}),
    ("POST", "transit/keys/existing/config", {"min_decryption_version": 9}),
    ("POST", "transit/keys/bad name", {}),
    ("POST", "secret/data/existing", {"data": "not an object"}),
    ("POST", "secret/data/existing", {"data": {}, "options": {"cas": -1}}),
    ("POST", "secret/data/a//b", {"data": {}}),
    ("POST", "secret/data/" + "x" * 200, {"data": {}}),
    ("POST", "secret/metadata/existing", {"max_versions": -1}),
    ("POST", "secret/metadata/existing", {"delete_version_after": "forever"}),
    ("POST", "secret/metadata/existing", {"custom_metadata": {"k": 1}}),
    ("POST", "secret/destroy/existing", {"versions": ["a"]}),
    ("GET", "secret/data/existing?version=-1", None),
    ("POST", "auth/token/create", {"ttl": "eternity"}),
    ("POST", "auth/token/create", {"num_uses": -1}),
    ("POST", "auth/token/create", {"policies": ["no such policy"]}),
    ("POST", "sys/policies/acl/x", {"policy": 'path "x" { capabilities = ["fly"] }'}),
]


@pytest.mark.parametrize(("method", "path", "body"), MALFORMED, ids=[f"{m} {p[:40]}" for m, p, _ in MALFORMED])
def test_malformed_input_is_a_4xx_in_vaults_shape(
    vault: tuple[str, str, httpx.Client], method: str, path: str, body: Any
) -> None:
    _, _, http = vault
    r = http.request(method, "/v1/" + path, json=body)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.json()["errors"], r.text


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b"[1, 2]", b'"a string"', b"\xff\xfe", b'{"data": ' * 2000],
)
def test_a_body_that_is_not_a_json_object_is_a_400(vault: tuple[str, str, httpx.Client], raw: bytes) -> None:
    _, _, http = vault
    r = http.post("/v1/secret/data/x", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["errors"][0].startswith("failed to parse JSON input")


def test_an_oversized_body_is_a_413_in_vaults_shape(vault: tuple[str, str, httpx.Client]) -> None:
    """Declared (Content-Length) or streamed (chunked): 413 with Vault's {"errors": [...]} body,
    which Vault's clients read (the native API's {"error", "message"} before)."""
    _, _, http = vault
    big = b"{" + b" " * (8 << 20) + b"}"
    for r in (
        http.post("/v1/transit/encrypt/existing", content=big),
        http.post("/v1/secret/data/x", content=iter([big[: 1 << 20]] * 9)),
    ):
        assert r.status_code == 413 and "over" in r.json()["errors"][0], r.text
