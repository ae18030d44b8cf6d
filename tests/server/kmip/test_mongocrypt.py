"""libmongocrypt (PyPI pymongocrypt: MongoDB's own KMIP client, as every MongoDB driver's
client-side field encryption uses it) round-trips an encrypted field against Strongroom in both
of its KMIP modes: KMIP 1.0 (the data key's master key registered as Secret Data, activated,
fetched with Get) and delegated KMIP 1.2 (an AES key made by Create, activated, the data key
wrapped and unwrapped by the server's Encrypt and Decrypt, never leaving it).  The driver's
part -- TLS to the KMS and the key vault -- is this file's: TLS with the client certificate
`strongroom kmip cert` issues, the key vault in memory."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.kmip.kmiphelp import issue
from tests.serverproc import Deployment

bson = pytest.importorskip("bson")
pymongocrypt = pytest.importorskip("pymongocrypt")

from pymongocrypt.options import MongoCryptOptions  # noqa: E402
from pymongocrypt.synchronous.explicit_encrypter import ExplicitEncrypter  # noqa: E402
from pymongocrypt.synchronous.state_machine import MongoCryptCallback  # noqa: E402

DETERMINISTIC = "AEAD_AES_256_CBC_HMAC_SHA_512-Deterministic"
RANDOM = "AEAD_AES_256_CBC_HMAC_SHA_512-Random"


class Driver(MongoCryptCallback):  # type: ignore[misc]
    """What a MongoDB driver gives libmongocrypt: KMS connections and a key vault."""

    def __init__(self, files: tuple[Path, Path, Path]) -> None:
        self.tls = ssl.create_default_context(cafile=str(files[2]))
        self.tls.check_hostname = False
        self.tls.load_cert_chain(str(files[0]), str(files[1]))
        self.vault: list[dict[str, Any]] = []
        self.kms_messages = 0

    def kms_request(self, kms_context: Any) -> None:
        host, port = kms_context.endpoint.rsplit(":", 1)
        with self.tls.wrap_socket(socket.create_connection((host, int(port)), timeout=10)) as sock:
            sock.sendall(kms_context.message)
            self.kms_messages += 1
            while kms_context.bytes_needed > 0:
                data = sock.recv(kms_context.bytes_needed)
                if not data:
                    raise ConnectionError("the KMS closed the connection")
                kms_context.feed(data)

    def collection_info(self, database: str, filter: bytes) -> None:  # noqa: A002 - the interface's names
        return None

    def mark_command(self, database: str, cmd: bytes) -> bytes:
        raise AssertionError("explicit encryption needs no markings")

    def fetch_keys(self, filter: bytes) -> Iterator[bytes]:  # noqa: A002
        wanted = bson.decode(filter)
        ids = {bytes(i) for clause in wanted.get("$or", []) for i in clause.get("_id", {}).get("$in", [])}
        for doc in self.vault:
            if not ids or bytes(doc["_id"]) in ids:
                yield bson.encode(doc)

    def insert_data_key(self, data_key: bytes) -> bytes:
        doc = bson.decode(data_key)
        self.vault.append(doc)
        return bytes(doc["_id"])

    def bson_encode(self, doc: Any) -> bytes:
        return bson.encode(doc)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def kms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("mongocrypt")
    d = Deployment(root, None)
    try:
        srv = d.start(kmip=True)
        client = d.register("mongod")
        yield {"d": d, "srv": srv, "client": client, "files": issue(client, root / "certs")}
    finally:
        d.close()


def round_trip(kms: dict[str, Any], master_key: dict[str, Any]) -> tuple[Driver, dict[str, Any]]:
    driver = Driver(kms["files"])
    endpoint = f"{kms['srv'].kmip[0]}:{kms['srv'].kmip[1]}"
    enc = ExplicitEncrypter(driver, MongoCryptOptions({"kmip": {"endpoint": endpoint}}))
    try:
        key_id = enc.create_data_key("kmip", master_key=master_key)
        for algorithm in (DETERMINISTIC, RANDOM):
            value = bson.encode({"v": "4111 1111 1111 1111"})
            sealed = enc.encrypt(value, algorithm, key_id=key_id)
            assert b"4111" not in sealed
            fresh = ExplicitEncrypter(driver, MongoCryptOptions({"kmip": {"endpoint": endpoint}}))  # no cached data key
            try:
                assert bson.decode(fresh.decrypt(sealed))["v"] == "4111 1111 1111 1111"
            finally:
                fresh.close()
    finally:
        enc.close()
    return driver, driver.vault[-1]["masterKey"]


def test_kmip_1_0_secret_data(kms: dict[str, Any]) -> None:
    driver, master = round_trip(kms, {})
    uid = master["keyId"]
    assert "delegated" not in master or not master["delegated"]
    listed = {x["name"]: x for x in kms["client"].list()}
    assert listed[f"kmip-{uid}"]["kmip"] == {"id": uid, "type": "SecretData", "state": "Active"}
    actions = [e["action"] for e in kms["d"].admin().audit_tail(limit=1000) if uid in e["target"]]
    assert "kmip.register" in actions and "kmip.activate" in actions and "kmip.get" in actions


def test_kmip_1_2_delegated(kms: dict[str, Any]) -> None:
    driver, master = round_trip(kms, {"delegated": True})
    uid = master["keyId"]
    assert master["delegated"] is True
    listed = {x["name"]: x for x in kms["client"].list()}
    assert listed[f"kmip-{uid}"]["kmip"] == {"id": uid, "type": "SymmetricKey", "state": "Active"}
    actions = [e["action"] for e in kms["d"].admin().audit_tail(limit=1000) if uid in e["target"]]
    assert "kmip.create" in actions and "kmip.encrypt" in actions and "kmip.decrypt" in actions
    assert "kmip.get" not in actions  # the master key never left the server
