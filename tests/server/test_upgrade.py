"""Schema migrations: a database made by the previous release (fixtures/release-1ec363f, made by
fixtures/make_release_fixture.py with that release's code) is upgraded in place at start, on
SQLite and on PostgreSQL, while a server of that release keeps serving it under load; a database
of a newer schema is refused with a clear message."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import hvac
import pytest

from strongroom.client import Client, StrongroomError
from strongroom.client.profile import Profile
from strongroom.server import storage
from strongroom.server.datadir import DataDir
from strongroom.server.run import spawn
from strongroom.server.schema import SCHEMA_VERSION
from tests.pg import PgCluster, _bin
from tests.serverproc import PASSPHRASE, ServerProcess, cli

RELEASE = "1ec363f"
FIXTURES = Path(__file__).parent / "fixtures" / f"release-{RELEASE}"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def old_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """That release's code, from this repository's history, with the C helpers of this tree."""
    root = tmp_path_factory.mktemp("release")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", RELEASE, "src"], capture_output=True)
    if archive.returncode != 0:
        raise RuntimeError(f"release {RELEASE} is not in this clone's history (a full clone is needed): {archive.stderr!r}")
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    for lib in (REPO / "src" / "strongroom").glob("*/lib*.so"):
        shutil.copy(lib, root / "src" / "strongroom" / lib.parent.name / lib.name)
    return root / "src"


class Installed:
    def __init__(self, root: Path, kind: str, pg: PgCluster | None) -> None:
        shutil.copytree(FIXTURES / kind, root, dirs_exist_ok=True)
        for dirpath, dirnames, filenames in os.walk(root):  # git keeps no modes
            for d in dirnames:
                os.chmod(os.path.join(dirpath, d), 0o700)
            for f in filenames:
                os.chmod(os.path.join(dirpath, f), 0o600)
        self.data = DataDir(root / "data")
        config = json.loads((root / "data" / "config.json").read_text())
        if pg is None:
            config["db_url"] = f"sqlite:///{root / 'data' / 'strongroom.db'}"
        else:
            config["db_url"] = pg.create_database(f"up{os.getpid()}_{time.monotonic_ns() % 10**9}")
            load = [_bin("psql"), "-q", "-v", "ON_ERROR_STOP=1", "-d", config["db_url"], "-f", str(root / "dump.sql")]
            subprocess.run(load, check=True, capture_output=True)
        (root / "data" / "config.json").write_text(json.dumps(config))
        self.db_url = config["db_url"]
        self.pwfile = root / "pw"
        self.pwfile.write_text(PASSPHRASE)
        self.expected = json.loads((root / "expected.json").read_text())
        self.root = root

    def client(self, name: str, url: str) -> Client:
        p = Profile.load(self.root / "profiles" / name)
        return Client([url], p.client_id, p.identity, self.data.ca_file)


@pytest.fixture(params=["sqlite", "postgresql"])
def installed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Installed]:
    pg = request.getfixturevalue("pg") if request.param == "postgresql" else None
    yield Installed(tmp_path / "fixture", request.param, pg)


def _check_release_data(inst: Installed, url: str) -> None:
    with inst.client("app", url) as app, inst.client("other", url) as other:
        assert app.get("db-password") == b"second" and app.get("db-password", version=1) == b"first"
        assert other.get("shared", owner=app.client_id) == b"for other"
    vault = hvac.Client(url=url, token=inst.expected["token"], verify=str(inst.data.ca_file))
    assert vault.secrets.kv.v2.read_secret_version(path="app/config")["data"]["data"] == {"user": "u", "password": "p"}
    plain = vault.secrets.transit.decrypt_data("orders", inst.expected["transit_ciphertext"])["data"]["plaintext"]
    assert plain == "aGVsbG8="


def test_the_previous_release_database_is_upgraded_in_place(installed: Installed) -> None:
    store = storage.Store(installed.db_url)
    assert store.schema_version() == 1
    store.dispose()
    s = ServerProcess(installed.data, pwfile=installed.pwfile)
    try:
        _check_release_data(installed, s.url)
        with installed.client("app", s.url) as app:
            app.put("after-upgrade", b"new")
            assert app.seal_status()["seal"] == "passphrase"
    finally:
        s.stop()
    store = storage.Store(installed.db_url)
    assert store.schema_version() == SCHEMA_VERSION
    store.dispose()
    r = cli("server", "audit", "verify", "--data", str(installed.data.path), "--passphrase-file", str(installed.pwfile))
    assert r.returncode == 0 and b"intact" in r.stdout, r.stderr


def test_an_old_server_under_load_survives_the_upgrade(installed: Installed, old_src: Path) -> None:
    log = open(installed.root / "old.log", "wb")  # noqa: SIM115 - closed below
    old, old_url = spawn(installed.data, 1, installed.pwfile, stderr=log, env={**os.environ, "PYTHONPATH": str(old_src)})
    acked: dict[str, bytes] = {}
    errors: list[str] = []
    stop = threading.Event()

    def load() -> None:
        with installed.client("app", old_url) as app:
            i = 0
            while not stop.is_set():
                name, value = f"load-{i}", f"value {i}".encode()
                try:
                    app.put(name, value)
                    acked[name] = value
                except StrongroomError as e:  # a clear refusal is allowed; a crash or a 500 is not
                    errors.append(f"{type(e).__name__}: {e}")
                i += 1

    worker = threading.Thread(target=load)
    worker.start()
    try:
        time.sleep(1.0)
        new = ServerProcess(installed.data, pwfile=installed.pwfile)  # upgrades while the old one serves
        try:
            time.sleep(2.0)
            with installed.client("app", new.url) as app:
                app.put("from-new", b"n")
            stop.set()
            worker.join(30)
            assert old.poll() is None, "the old release's server died"
            with installed.client("app", old_url) as app:  # still serving after the upgrade
                assert app.get("from-new") == b"n"
            _check_release_data(installed, new.url)
            with installed.client("app", new.url) as app:
                for name, value in acked.items():
                    assert app.get(name) == value
        finally:
            new.stop()
    finally:
        stop.set()
        worker.join(30)
        if old.poll() is None:
            old.terminate()
            old.wait(20)
        log.close()
    assert len(acked) > 10 and not [e for e in errors if "500" in e or "Unavailable" in e], errors[:5]
    r = cli("server", "audit", "verify", "--data", str(installed.data.path), "--passphrase-file", str(installed.pwfile))
    assert r.returncode == 0 and b"intact" in r.stdout, r.stderr


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    from tests.serverproc import Deployment

    d = Deployment(tmp_path, None)
    store = storage.Store(d.db_url)
    with store.exclusive() as tx:
        tx.run("UPDATE meta SET value = ? WHERE key = 'schema_version'", str(SCHEMA_VERSION + 1))
    store.dispose()
    r = cli("server", "start", "--data", str(d.data.path), "--passphrase-file", str(d.pwfile), "--listen", "127.0.0.1:0")
    want = f"the database's schema is version {SCHEMA_VERSION + 1}, newer than this release's {SCHEMA_VERSION}".encode()
    assert r.returncode == 1 and want in r.stderr and b"Traceback" not in r.stderr, r.stderr
    r = cli("server", "backup", "--data", str(d.data.path), "--out", str(tmp_path / "b"), "--passphrase-file", str(d.pwfile))
    assert r.returncode == 1 and want in r.stderr and b"Traceback" not in r.stderr, r.stderr
    assert sys.executable  # the same interpreter ran both
