"""The server certificate renewed with no restart: by the watched file and by SIGHUP; its
expiry in /metrics and warned about in the log."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

import httpx

from strongroom.server import tls
from tests.serverproc import Deployment, ServerProcess, cli, eventually


def _eventually(check: Callable[[], bool], timeout: float = 15) -> None:
    eventually(check, timeout)


def _served_cert(s: ServerProcess) -> str:
    host, port = s.url.removeprefix("https://").rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(s.data.ca_file))
    with socket.create_connection((host, int(port)), timeout=5) as raw, ctx.wrap_socket(raw, server_hostname=host) as conn:
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def test_renew_reaches_new_connections_without_a_restart(tmp_path: Path) -> None:
    d = Deployment(tmp_path, None)
    try:
        s = d.start(workers=2)
        pids = s.pids()
        before = _served_cert(s)
        keep = d.register()  # an open connection keeps working across the renewal
        keep.put("k", b"v")
        r = cli("server", "tls", "renew", "--data", str(d.data.path))
        assert r.returncode == 0 and b"valid until" in r.stdout, r.stderr
        _eventually(lambda: all(_served_cert(s) != before for _ in range(6)))  # both workers
        assert keep.get("k") == b"v"
        assert s.pids() == pids  # no process was restarted
        assert "TLS certificate reloaded (the file changed)" in s.log_text()
    finally:
        d.close()


def test_sighup_reloads_and_a_broken_pair_keeps_the_old_one(tmp_path: Path) -> None:
    d = Deployment(tmp_path, None)
    try:
        s = d.start()
        tls_dir = d.data.tls
        good_key = (tls_dir / "server-key.pem").read_bytes()
        os.kill(s.proc.pid, signal.SIGHUP)  # the supervisor passes it on; nobody dies
        _eventually(lambda: "TLS certificate reloaded (SIGHUP)" in s.log_text())
        assert s.proc.poll() is None
        before = _served_cert(s)
        tls.renew(tls_dir)
        os.replace(tls_dir / "server-key.pem", tls_dir / "new-key.bak")
        (tls_dir / "server-key.pem").write_bytes(good_key)  # a key that does not match the new certificate
        os.kill(s.proc.pid, signal.SIGHUP)
        _eventually(lambda: "TLS certificate not reloaded (SIGHUP): the key does not match the certificate" in s.log_text())
        assert _served_cert(s) == before  # still serving the old, working pair
        s.wait_healthy()
    finally:
        d.close()


def test_expiry_in_metrics_and_a_warning_30_days_ahead(tmp_path: Path) -> None:
    d = Deployment(tmp_path, None)
    try:
        cert = tls.renew(d.data.tls, days=10)
        tls.client_certificate(d.data.tls, "kmip-client")
        s = d.start()
        text = httpx.get(s.url + "/metrics", verify=str(d.data.ca_file)).text
        name = "strongroom_tls_cert_expiry_timestamp_seconds"
        lines = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line.startswith(name)}
        assert lines[name + '{cert="server"}'] == cert.not_valid_after_utc.timestamp()
        assert {name + '{cert="ca"}', name + '{cert="kmip-client"}'} <= set(lines)
        _eventually(lambda: "TLS certificate server.pem expires in" in s.log_text())
        r = cli("server", "tls", "status", "--data", str(d.data.path))
        assert b"server.pem" in r.stdout and b"(9 days)" in r.stdout, r.stdout
    finally:
        d.close()


def test_a_fifo_in_place_of_the_certificate_keeps_the_old_pair(tmp_path: Path) -> None:
    d = Deployment(tmp_path, None)
    try:
        s = d.start()
        before = _served_cert(s)
        pem = d.data.tls / "server.pem"
        pem.rename(d.data.tls / "server.pem.bak")
        os.mkfifo(pem)  # no writer: a blocking open would hang the worker's event loop
        os.kill(s.proc.pid, signal.SIGHUP)
        eventually(lambda: "TLS certificate not reloaded (SIGHUP): not a regular file" in s.log_text())
        assert _served_cert(s) == before
        s.wait_healthy()
    finally:
        d.close()
