"""PyKMIP's own server (its engine, SQLite, its operation policies): the KMIP tests' reference
and the KMIP benchmark's peer, run from the venv scripts/install.sh makes for it beside the main
one (PyKMIP 0.10 needs SQLAlchemy 1.x)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from strongroom.server import tls

BINARY = Path(sys.prefix) / "pykmip" / "bin" / "pykmip-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PyKmipServer:
    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.tls_dir = root / "tls"
        tls.create(self.tls_dir, ["127.0.0.1"])
        (root / "policies").mkdir()
        self.address = ("127.0.0.1", free_port())
        conf = root / "server.conf"
        settings = {
            "hostname": "127.0.0.1",
            "port": self.address[1],
            "certificate_path": self.tls_dir / "server.pem",
            "key_path": self.tls_dir / "server-key.pem",
            "ca_path": self.tls_dir / "ca.pem",
            "auth_suite": "TLS1.2",
            "policy_path": root / "policies",
            "enable_tls_client_auth": True,
            "logging_level": "WARNING",
            "database_path": root / "db.sqlite",
        }
        conf.write_text("[server]\n" + "".join(f"{k}={v}\n" for k, v in settings.items()))
        self.log = open(root / "pykmip.log", "wb")  # noqa: SIM115
        args = [str(BINARY), "-f", str(conf), "-l", str(root / "server.log")]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(self.address, timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"PyKMIP's server did not start: {(root / 'pykmip.log').read_text()[-2000:]}")

    def pids(self) -> list[int]:
        return [self.proc.pid]

    def client_files(self, name: str) -> tuple[Path, Path, Path]:
        cert, key = tls.client_certificate(self.tls_dir, name)
        return cert, key, self.tls_dir / "ca.pem"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
