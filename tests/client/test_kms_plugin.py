"""The Kubernetes KMS v2 plugin driven as the apiserver drives it: stubs compiled from the API's
proto, a gRPC client on the unix socket, a real key server behind it; rotation shows in Status
and old ciphertexts still decrypt; an outage (the server sealed) is an unhealthy Status and
UNAVAILABLE, and everything works again once it is back."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.serverproc import Deployment, eventually


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("kmsapi")
    proto = Path(__file__).parent / "kms_v2_api.proto"
    code = protoc.main(["protoc", f"-I{proto.parent}", f"--python_out={out}", f"--grpc_python_out={out}", str(proto)])
    assert code == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("kms_v2_api_pb2"), importlib.import_module("kms_v2_api_pb2_grpc")
    finally:
        sys.path.remove(str(out))


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[tuple[Deployment, Path, Any]]:
    (tmp_path / "srv").mkdir()
    d = Deployment(tmp_path / "srv", None)
    d.start()
    host = d.register("k8s-node")
    sock = tmp_path / "kms.sock"
    args = [sys.executable, "-m", "strongroom.cli.main", "kms-plugin", "--socket", str(sock), "--key", "etcd"]
    proc = subprocess.Popen([*args, "--profile", str(d.root / "profiles" / "k8s-node")], stderr=subprocess.PIPE)
    eventually(lambda: sock.exists() or proc.poll() is not None, 20)
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
    yield d, sock, host
    proc.terminate()
    proc.wait(10)
    d.close()


def test_encrypt_decrypt_rotate_and_an_outage(api: Any, plugin: tuple[Deployment, Path, Any]) -> None:
    pb, rpc = api
    d, sock, host = plugin
    assert oct(sock.stat().st_mode & 0o777) == "0o600"
    with grpc.insecure_channel(f"unix://{sock}") as channel:
        kms = rpc.KeyManagementServiceStub(channel)
        status = kms.Status(pb.StatusRequest())
        assert (status.version, status.healthz, status.key_id) == ("v2", "ok", "strongroom/etcd/v1")
        dek = os.urandom(32)
        enc = kms.Encrypt(pb.EncryptRequest(plaintext=dek, uid="u1"))
        assert enc.key_id == "strongroom/etcd/v1" and dek not in enc.ciphertext and len(enc.ciphertext) < 1024
        assert kms.Decrypt(pb.DecryptRequest(ciphertext=enc.ciphertext, uid="u2", key_id=enc.key_id)).plaintext == dek
        host.transit_rotate("etcd")
        assert kms.Status(pb.StatusRequest()).key_id == "strongroom/etcd/v2"
        enc2 = kms.Encrypt(pb.EncryptRequest(plaintext=dek, uid="u3"))
        assert enc2.key_id == "strongroom/etcd/v2"
        assert kms.Decrypt(pb.DecryptRequest(ciphertext=enc.ciphertext, key_id=enc.key_id)).plaintext == dek  # the old one
        with pytest.raises(grpc.RpcError) as e:
            kms.Decrypt(pb.DecryptRequest(ciphertext=b"not ours", key_id=enc.key_id))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as e:
            kms.Encrypt(pb.EncryptRequest(plaintext=b"x" * 5000))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        d.admin().seal()  # an outage of the server's keys
        eventually(lambda: kms.Status(pb.StatusRequest()).healthz != "ok", 10)
        assert kms.Status(pb.StatusRequest()).key_id == "strongroom/etcd/v2"  # the last one known
        with pytest.raises(grpc.RpcError) as e:
            kms.Decrypt(pb.DecryptRequest(ciphertext=enc.ciphertext, key_id=enc.key_id))
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        d.admin().unseal(d.pwfile.read_text().strip())
        eventually(lambda: kms.Status(pb.StatusRequest()).healthz == "ok", 10)
        time.sleep(0.2)
        assert kms.Decrypt(pb.DecryptRequest(ciphertext=enc2.ciphertext, key_id=enc2.key_id)).plaintext == dek
