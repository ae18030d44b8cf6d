"""Real servers for tests: init a data dir, start `strongroom server start` as a process over TLS."""

from __future__ import annotations

import itertools
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from strongroom.bench.peers import free_port
from strongroom.client import Client
from strongroom.server.datadir import DataDir
from strongroom.server.run import spawn
from strongroom.server.setup import init_server

PASSPHRASE = "test passphrase, not for production"


def tls(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


_names = itertools.count()


def cli(
    *args: str,
    env: dict[str, str] | None = None,
    input: bytes | None = None,  # noqa: A002 - mirrors subprocess.run
    timeout: float = 60,
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "strongroom.cli.main", *args],
        capture_output=True,
        env={**os.environ, **(env or {})},
        input=input,
        timeout=timeout,
    )


def eventually(check: Callable[[], bool], timeout: float = 15) -> None:
    """Wait (polling every 0.1 s) until ``check()`` holds; AssertionError after ``timeout`` s."""
    deadline = time.time() + timeout
    while not check():
        if time.time() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.1)


class ServerProcess:
    """One `strongroom server start` process tree on a data dir."""

    def __init__(
        self, data: DataDir, workers: int = 1, sealed: bool = False, pwfile: Path | None = None, kmip: bool = False
    ) -> None:
        self.data = data
        self.log = open(data.path.parent / f"server-{next(_names)}.log", "w+b")  # noqa: SIM115
        self.kmip = ("127.0.0.1", free_port()) if kmip else None  # KMIP's address
        listen = f"127.0.0.1:{self.kmip[1]}" if self.kmip else None
        try:
            self.proc, self.url = spawn(data, workers, None if sealed else pwfile, stderr=self.log, kmip_listen=listen)
        except RuntimeError as e:
            self.log.seek(0)
            raise RuntimeError(f"{e}: {self.log.read().decode()[-2000:]}") from None
        self.wait_healthy()

    def wait_healthy(self, timeout: float = 20) -> dict[str, Any]:
        deadline = time.time() + timeout
        while True:
            try:
                r = httpx.get(self.url + "/health", verify=tls(self.data.ca_file), timeout=2)
                return dict(r.json())
            except httpx.HTTPError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.1)

    def log_text(self) -> str:
        """What the server wrote to its log (stderr) so far."""
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def pids(self) -> list[int]:
        from strongroom.bench.procs import tree

        return tree(self.proc.pid)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()
        return self.proc.returncode

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.log.close()


class Deployment:
    """A data dir with its database, the admin client, and any number of running server processes."""

    def __init__(
        self, root: Path, db_url: str | None, deposit_limit: int | None = None, unlock: Any = PASSPHRASE, **seal: Any
    ) -> None:
        """``unlock`` and ``seal``: as init_server takes them (a passphrase by default)."""
        self.root = root
        self.data = DataDir(root / "data")
        self.pwfile = root / "passphrase"
        self.pwfile.write_text(PASSPHRASE + "\n")
        res = init_server(self.data, unlock, db_url, deposit_limit=deposit_limit, **seal)
        self.shares = getattr(res, "shares", [])  # an earlier release makes no shares (fixtures/make_release_fixture.py)
        self.org = res.org
        self.secret = res.auth_secret
        self.db_url = res.db_url
        self.servers: list[ServerProcess] = []
        self._clients: list[Client] = []

    def start(self, workers: int = 1, sealed: bool = False, kmip: bool = False) -> ServerProcess:
        s = ServerProcess(self.data, workers, sealed, self.pwfile, kmip)
        self.servers.append(s)
        return s

    @property
    def url(self) -> str:
        return self.servers[0].url

    def admin(self, server: ServerProcess | None = None) -> Client:
        from strongroom.client.profile import Profile

        p = Profile.load(self.data.admin_profile)
        c = Client([(server or self.servers[0]).url], p.client_id, p.identity, p.ca_file)
        self._clients.append(c)
        return c

    def register(self, name: str | None = None, server: ServerProcess | None = None, urls: list[str] | None = None) -> Client:
        name = name or f"host{next(_names)}"
        c = Client.register(
            urls or [(server or self.servers[0]).url],
            self.org,
            self.secret,
            name,
            self.root / "profiles" / name,
            self.data.ca_file,
        )
        self._clients.append(c)
        return c

    def close(self) -> None:
        for c in self._clients:
            c.close()
        for s in self.servers:
            if s.proc.poll() is None:
                s.stop()
