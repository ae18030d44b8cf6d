"""Network-bound unlock: volumes bound to Tang servers, in both directions against Debian's
tang and clevis — our client with their tangd (one server, 2 of 3, a rotated-away key, a
pinned thumbprint), their clevis with our key server's /tang (each recovery audited), and our
client with our server; malformed recoveries answered 4xx."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from strongroom.crypto import mcr
from tests.serverproc import Deployment, cli

TANGD = Path("/usr/libexec/tangd")
needs_tang = pytest.mark.skipif(not TANGD.exists() or shutil.which("clevis") is None, reason="tang and clevis (install.sh)")
pytestmark = needs_tang


class Tangd:
    """Debian's tangd (inetd-style: one request on stdin) behind a loopback listener."""

    def __init__(self, root: Path) -> None:
        self.db = root
        root.mkdir(parents=True)
        subprocess.run(["/usr/libexec/tangd-keygen", str(root)], check=True, capture_output=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.up = True
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if not self.up:
                conn.close()
                continue
            p = subprocess.Popen([str(TANGD), str(self.db)], stdin=conn.fileno(), stdout=conn.fileno(), stderr=subprocess.DEVNULL)
            conn.close()
            threading.Thread(target=p.wait, daemon=True).start()

    def signing_thumbprint(self) -> str:
        keys = mcr.verify_advertisement(httpx.get(self.url + "/adv").content)
        return next(mcr.thumbprint(k) for k in keys if "verify" in k["key_ops"])

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def tangs(tmp_path: Path) -> Iterator[list[Tangd]]:
    servers = [Tangd(tmp_path / f"tang{i}") for i in range(3)]
    yield servers
    for s in servers:
        s.close()


def _mount_roundtrip(lower: Path, mnt: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    mnt.mkdir(exist_ok=True)
    r = cli("fs", "mount", str(lower), str(mnt), env=env)
    if r.returncode == 0:
        try:
            (mnt / "f").write_text("through tang")
            assert (mnt / "f").read_text() == "through tang"
        finally:
            assert cli("fs", "umount", str(mnt)).returncode == 0
    return r


def test_our_client_with_their_tangd(tmp_path: Path, tangs: list[Tangd]) -> None:
    one = tangs[0]
    r = cli("fs", "init", str(tmp_path / "v1"), "--tang", one.url)
    assert r.returncode != 0 and b"--tang-thumbprint" in r.stderr  # trust must be said
    r = cli("fs", "init", str(tmp_path / "v1"), "--tang", one.url, "--tang-thumbprint", "A" * 43)
    assert r.returncode != 0 and b"not among the thumbprints given" in r.stderr
    r = cli("fs", "init", str(tmp_path / "v1"), "--tang", one.url, "--tang-thumbprint", one.signing_thumbprint())
    assert r.returncode == 0, r.stderr
    assert _mount_roundtrip(tmp_path / "v1", tmp_path / "m1").returncode == 0
    one.up = False  # off the network: no unlock, and a clear reason
    r = _mount_roundtrip(tmp_path / "v1", tmp_path / "m1")
    assert r.returncode != 0 and b"Tang: 0 of the 1 Tang servers needed answered" in r.stderr and b"Traceback" not in r.stderr


def test_two_of_three_and_a_rotated_away_key(tmp_path: Path, tangs: list[Tangd]) -> None:
    args = [a for t in tangs for a in ("--tang", t.url)]
    r = cli("fs", "init", str(tmp_path / "v"), *args, "--tang-threshold", "2", "--tang-trust")
    assert r.returncode == 0, r.stderr
    tangs[0].up = False
    assert _mount_roundtrip(tmp_path / "v", tmp_path / "m").returncode == 0  # any two suffice
    subprocess.run(["/usr/libexec/tangd-rotate-keys", "-d", str(tangs[1].db)], check=True, capture_output=True)
    assert _mount_roundtrip(tmp_path / "v", tmp_path / "m").returncode == 0  # rotated keys still recover
    for hidden in tangs[1].db.glob(".*.jwk"):
        hidden.unlink()  # the old keys deleted: that server can no longer help
    r = _mount_roundtrip(tmp_path / "v", tmp_path / "m")
    assert r.returncode != 0 and b"no longer has the exchange key" in r.stderr and b"1 of the 2" in r.stderr


@pytest.fixture
def ours(tmp_path: Path) -> Iterator[Deployment]:
    (tmp_path / "srv").mkdir()
    d = Deployment(tmp_path / "srv", None)
    d.start()
    yield d
    d.close()


def test_their_clevis_with_our_server(ours: Deployment, tmp_path: Path) -> None:
    env = {**os.environ, "CURL_CA_BUNDLE": str(ours.data.ca_file)}
    url = ours.url + "/tang"
    encrypt = ["clevis", "encrypt", "tang", json.dumps({"url": url}), "-y"]
    jwe = subprocess.run(encrypt, input=b"bound secret", env=env, capture_output=True, check=True).stdout
    out = subprocess.run(["clevis", "decrypt"], input=jwe, env=env, capture_output=True)
    assert out.returncode == 0 and out.stdout == b"bound secret", out.stderr
    cli("server", "tang", "rotate", "--data", str(ours.data.path))
    out = subprocess.run(["clevis", "decrypt"], input=jwe, env=env, capture_output=True)
    assert out.returncode == 0 and out.stdout == b"bound secret"  # an older generation still recovers
    recoveries = [e for e in ours.admin().audit_tail(-1, 200) if e["action"] == "tang.recover"]
    assert [e["outcome"] for e in recoveries] == ["ok", "ok"] and recoveries[0]["detail"]["source"] == "127.0.0.1"
    assert [e["detail"]["generation"] for e in recoveries] == [1, 1]


def test_our_client_with_our_server_and_bad_recoveries(ours: Deployment, tmp_path: Path) -> None:
    env = {"SSL_CERT_FILE": str(ours.data.ca_file)}
    r = cli("fs", "init", str(tmp_path / "v"), "--tang", ours.url + "/tang", "--tang-trust", env=env)
    assert r.returncode == 0, r.stderr
    assert _mount_roundtrip(tmp_path / "v", tmp_path / "m", env=env).returncode == 0
    ca = str(ours.data.ca_file)
    adv = mcr.verify_advertisement(httpx.get(ours.url + "/tang/adv", verify=ca).content)
    kid = next(mcr.thumbprint(k) for k in adv if k.get("alg") == "ECMR")
    off_curve = {"kty": "EC", "crv": "P-521", "x": "A" * 88, "y": "A" * 87 + "B"}
    r = httpx.post(f"{ours.url}/tang/rec/{kid}", json=off_curve, verify=ca)
    assert r.status_code == 400 and "not on P-521" in r.json()["message"]
    r = httpx.post(f"{ours.url}/tang/rec/{'Z' * 43}", json=off_curve, verify=ca)
    assert r.status_code == 404
    r = httpx.post(f"{ours.url}/tang/rec/{kid}", content=b"[1, 2]", headers={"content-type": "application/jwk+json"}, verify=ca)
    assert r.status_code == 422
    entries = [e for e in ours.admin().audit_tail(-1, 200) if e["action"] == "tang.recover"]
    outcomes = [(e["outcome"], e["detail"].get("reason", "")) for e in entries]
    assert outcomes[0] == ("ok", "") and ("denied", "no exchange key with that thumbprint") in outcomes
    ours.admin().seal()
    r = httpx.post(f"{ours.url}/tang/rec/{kid}", json=off_curve, verify=ca)
    assert r.status_code == 503
