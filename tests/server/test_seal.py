"""Sealing, unsealing and master-key rotation across every worker and server process."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from strongroom.client import Client, Denied, NotFound, Sealed
from strongroom.crypto import aead
from strongroom.server import barrier, storage
from tests.serverproc import PASSPHRASE, Deployment, cli, eventually


def _eventually(check: Callable[[], bool], timeout: float = 10) -> None:
    eventually(check, timeout)


def _sealed(probe: Callable[[], object]) -> bool:
    try:
        probe()
    except NotFound:  # before the put: unsealed all the same
        return False
    except Sealed:
        return True
    return False


def _all_workers(c: Client, expect_sealed: bool, tries: int = 12) -> bool:
    """Fresh connections land on either worker: every one must agree. A get is answered by the
    server's writer process, whoami by the worker that holds the connection: both must agree."""
    for _ in range(tries):
        with Client(c.servers, c.client_id, c._identity, c.ca_file) as fresh:
            if _sealed(lambda: fresh.get("k")) != expect_sealed or _sealed(fresh.whoami) != expect_sealed:
                return False
    return True


def test_started_sealed_until_unsealed_everywhere(deployment: Deployment) -> None:
    # two server processes with two workers each, on one database
    s1 = deployment.start(workers=2, sealed=True)
    s2 = deployment.start(workers=2, sealed=True)
    assert s1.wait_healthy()["sealed"] is True
    admin = deployment.admin(s1)
    r = cli("server", "unseal", "--data", str(deployment.data.path), "--server", s1.url, "--passphrase-file", "/dev/null")
    assert r.returncode != 0 and b"empty" in r.stderr
    bad = deployment.root / "bad"
    bad.write_text("wrong")
    r = cli("server", "unseal", "--data", str(deployment.data.path), "--server", s1.url, "--passphrase-file", str(bad))
    assert r.returncode == 1 and b"wrong passphrase" in r.stderr
    r = cli(
        "server", "unseal", "--data", str(deployment.data.path), "--server", s1.url, "--passphrase-file", str(deployment.pwfile)
    )
    assert r.returncode == 0, r.stderr
    clients: list[Client] = []

    def register_via_s2() -> bool:  # needs s2 unsealed: it gets its grant through the database
        try:
            clients.append(deployment.register(server=s2))
        except Sealed:
            return False
        return True

    _eventually(register_via_s2)
    c = clients[0]
    c2 = Client([s2.url], c.client_id, c._identity, deployment.data.ca_file)
    _eventually(lambda: _all_workers(c2, expect_sealed=False))
    c1 = Client([s1.url], c.client_id, c._identity, deployment.data.ca_file)
    _eventually(lambda: _all_workers(c1, expect_sealed=False))
    c.put("k", b"v")
    # the admin's kept-alive connection may sit on a worker that fresh connections never reached
    _eventually(lambda: not _sealed(admin.whoami))
    admin.seal()
    _eventually(lambda: _all_workers(c2, expect_sealed=True) and _all_workers(c1, expect_sealed=True))
    with pytest.raises(Sealed):
        c.whoami()
    admin.unseal(PASSPHRASE)
    _eventually(lambda: _all_workers(c2, expect_sealed=False))
    entries = admin.audit_tail(-1, 1000)
    actions = [e["action"] for e in entries]
    unseals = [(e["outcome"], "while_sealed_at" in e["detail"]) for e in entries if e["action"] == "unseal"]
    # the refusal made while sealed was held, then chained by the unseal, before its own entry
    assert unseals == [("denied", True), ("ok", False), ("ok", False)] and "seal" in actions


def test_a_wrong_passphrase_on_an_unsealed_server_is_refused_and_audited(running: Deployment) -> None:
    admin = running.admin()
    with pytest.raises(Denied, match="wrong passphrase"):
        admin.unseal("not the passphrase")
    assert admin.unseal(PASSPHRASE) == {"sealed": False, "changed": False, "seal": "passphrase"}
    unseals = [(e["outcome"], e["detail"].get("reason")) for e in admin.audit_tail(-1, 1000) if e["action"] == "unseal"]
    assert unseals == [("denied", "wrong passphrase"), ("ok", None)]


def test_unseal_needs_admin(running: Deployment) -> None:
    c = running.register()
    with pytest.raises(Denied):
        c.unseal(PASSPHRASE)
    with pytest.raises(Denied):
        c.seal()


def test_rotation_rewraps_keys_not_ciphertext(deployment: Deployment) -> None:
    s1 = deployment.start(workers=2)
    s2 = deployment.start()
    c = deployment.register(server=s1)
    for i in range(5):
        c.put(f"k{i}", f"value {i}".encode())
        c.put(f"k{i}", f"value {i} v2".encode())
    store = storage.Store(deployment.db_url)
    versions = "SELECT deposit_id, version, ciphertext, wrapped_key FROM deposit_versions"
    with store.exclusive() as tx:
        unseal = barrier._unseal_key_for(barrier.seal_config(tx), barrier.Unlock(PASSPHRASE))  # read as an outsider would
        old_master = aead.unwrap_key(unseal, bytes(tx.value("SELECT wrapped FROM master_keys")), barrier._master_aad(1))
        before = {(r[0], r[1]): (bytes(r[2]), bytes(r[3])) for r in tx.all(versions)}
    r = cli("server", "rotate-master-key", "--data", str(deployment.data.path), "--server", s1.url, "--json")
    assert r.returncode == 0, r.stderr
    assert b'"generation": 2' in r.stdout
    with store.exclusive() as tx:
        after = {(r[0], r[1]): (bytes(r[2]), bytes(r[3])) for r in tx.all(versions)}
        gens = {r[0] for r in tx.all("SELECT generation FROM master_keys")}
        rows = tx.all(
            "SELECT v.deposit_id, v.version, v.wrapped_key, d.owner_id "
            "FROM deposit_versions v JOIN deposits d ON d.id = v.deposit_id"
        )
    store.dispose()
    assert gens == {2}
    assert before.keys() == after.keys()
    for k in before:
        assert before[k][0] == after[k][0]  # ciphertext untouched
        assert before[k][1] != after[k][1]  # data key re-wrapped
    for deposit_id, version, wrapped, owner in rows:  # the old master key opens nothing any more
        with pytest.raises(aead.DecryptionError):
            aead.unwrap_key(old_master, bytes(wrapped), barrier.dk_aad(deposit_id, owner, version))
    # every process follows: reads through the other server and fresh connections
    c2 = Client([s2.url], c.client_id, c._identity, deployment.data.ca_file)
    for i in range(5):
        assert c2.get(f"k{i}") == f"value {i} v2".encode()
        assert c.get(f"k{i}", version=1) == f"value {i}".encode()
    c2.put("after", b"rotation")
    assert c.get("after") == b"rotation"
    r = cli("server", "audit", "verify", "--data", str(deployment.data.path), "--passphrase-file", str(deployment.pwfile))
    assert r.returncode == 0, r.stdout + r.stderr


def test_private_files_are_private(running: Deployment) -> None:
    """Every file of the data dir that holds a secret, the database included, is 0600 (the
    database's WAL and shm too), in a 0700 directory."""
    c = running.register()
    c.put("k", b"v")
    data = running.data.path
    assert data.stat().st_mode & 0o777 == 0o700
    private = ["node.key", "audit.head", "tls/ca-key.pem", "tls/server-key.pem", "admin/identity.key", "config.json"]
    if running.db_url.startswith("sqlite"):
        private += ["strongroom.db", "strongroom.db-wal", "strongroom.db-shm"]
    modes = {p: oct((data / p).stat().st_mode & 0o777) for p in private}
    assert set(modes.values()) == {"0o600"}, modes
