"""Unsealing with shares given one at a time to different server processes (two servers on one
database, SQLite and PostgreSQL), refusals audited, reset, rekey; and the CLI around them."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strongroom.client import Client, Denied, InvalidRequest, Sealed
from strongroom.crypto import shares
from strongroom.server import barrier, storage
from tests.serverproc import Deployment, cli, eventually


def _eventually(check: Callable[[], bool], timeout: float = 15) -> None:
    eventually(check, timeout)


def _audit_readable(admin: Client) -> bool:
    try:
        admin.audit_tail(-1, 1)
    except Sealed:
        return False
    return True


@pytest.fixture
def split(tmp_path: Path, db_url: str | None) -> Iterator[Deployment]:
    d = Deployment(tmp_path, db_url, unlock=barrier.Unlock(), key_shares=3, key_threshold=2)
    yield d
    d.close()


def _typo(share: str) -> str:
    words = share.split()
    words[4] = "academic" if words[4] != "academic" else "acid"
    return " ".join(words)


def _unsealed_everywhere(d: Deployment) -> bool:
    for s in d.servers:
        for _ in range(6):  # fresh connections reach every worker
            with d.admin(s) as a:
                try:
                    a.whoami()
                except Sealed:
                    return False
    return True


def test_shares_from_two_servers_unseal_both(split: Deployment) -> None:
    s1 = split.start(workers=2, sealed=True)
    s2 = split.start(sealed=True)
    a1, a2 = split.admin(s1), split.admin(s2)
    status = a1.seal_status()
    got = (status["sealed"], status["seal"], status["threshold"], status["shares"], status["progress"])
    assert got == (True, "shares", 2, 3, 0)
    with pytest.raises(Sealed):
        a1.whoami()
    with pytest.raises(InvalidRequest, match="checksum"):
        a1.unseal(share=_typo(split.shares[0]))
    other = shares.split(os.urandom(32), 3, 2)[0]
    with pytest.raises(Denied, match="not one of this server's current shares"):
        a2.unseal(share=other)
    with pytest.raises(InvalidRequest, match="2 of 3 shares, not a passphrase"):
        a1.unseal(passphrase="a passphrase to a server sealed with shares")
    out = a1.unseal(share=split.shares[0])
    assert (out["sealed"], out["progress"], out["changed"]) == (True, 1, False)
    with pytest.raises(InvalidRequest, match="given already"):
        a2.unseal(share=split.shares[0])  # the other server knows it was given
    assert a2.seal_status()["progress"] == 1
    out = a2.unseal(share=split.shares[2])
    assert (out["sealed"], out["changed"]) == (False, True)
    _eventually(lambda: _unsealed_everywhere(split))
    assert a1.seal_status()["progress"] == 0
    entries = a1.audit_tail(-1, 1000)
    unseal = [(e["action"], e["outcome"], e["detail"].get("reason")) for e in entries if e["action"].startswith("unseal")]
    assert unseal == [
        ("unseal", "denied", "malformed share"),
        ("unseal", "denied", "share of another split"),
        ("unseal", "denied", "not this server's kind of seal"),
        ("unseal.share", "ok", None),
        ("unseal", "denied", "duplicate share"),
        ("unseal", "ok", None),
    ]
    assert entries[-1]["detail"]["by"] == "shares" and len(entries[-1]["detail"]["given_by"]) == 1
    logged = json.dumps(entries)
    words = split.shares[0].split()
    assert not any(f"{a} {b}" in logged for a, b in zip(words, words[1:], strict=False))  # no share's words in the log


def test_two_admins_each_give_a_share(split: Deployment, tmp_path: Path) -> None:
    s = split.start()
    alice = tmp_path / "alice"
    r = cli("server", "admin-add", "--data", str(split.data.path), "--server", s.url, "--name", "alice", "--out", str(alice))
    assert r.returncode == 1 and b"sealed" in r.stderr.lower()  # making an admin is audited: needs the keys
    base = ["server", "unseal", "--data", str(split.data.path), "--server", s.url]
    first = tmp_path / "first"
    first.write_text(split.shares[0])
    second = tmp_path / "second"
    second.write_text(split.shares[1])
    assert cli(*base, "--share-file", str(first)).returncode == 0
    assert cli(*base, "--share-file", str(second)).returncode == 0
    r = cli("server", "admin-add", "--data", str(split.data.path), "--server", s.url, "--name", "alice", "--out", str(alice))
    assert r.returncode == 0, r.stderr
    admin = split.admin(s)
    admin.seal()
    _eventually(lambda: admin.seal_status()["sealed"] is True)
    assert cli(*base, "--share-file", str(first)).returncode == 0  # the first admin's share
    r = cli("server", "unseal", "--profile", str(alice), "--share-file", str(second))  # alice's, from her profile
    assert r.returncode == 0 and r.stdout.strip() == b"unsealed", r.stderr
    # the process that combined the shares is unsealed at once; the writer (the audit tail runs
    # there) takes its grant at its next tick
    _eventually(lambda: admin.seal_status()["sealed"] is False and _audit_readable(admin))
    last = [e for e in admin.audit_tail(-1, 200) if e["action"] == "unseal"][-1]
    alice_id = json.loads((alice / "profile.json").read_text())["client_id"]
    assert sorted(last["detail"]["given_by"]) == sorted([admin.client_id, alice_id])


def test_reset_forgets_the_shares_given(split: Deployment) -> None:
    s = split.start(sealed=True)
    a = split.admin(s)
    assert a.unseal(share=split.shares[1])["progress"] == 1
    out = a.unseal(reset=True)
    assert (out["sealed"], out["progress"]) == (True, 0)
    assert a.unseal(share=split.shares[1])["progress"] == 1  # not a duplicate any more
    assert a.unseal(share=split.shares[0])["sealed"] is False


def test_rekey_makes_new_shares_and_retires_the_old(split: Deployment) -> None:
    s = split.start(sealed=True)
    a = split.admin(s)
    a.unseal(share=split.shares[0])
    a.unseal(share=split.shares[1])
    _eventually(lambda: _unsealed_everywhere(split))
    host = split.register()
    host.put("kept", b"across the rekey")
    rows = "SELECT deposit_id, version, master_gen, wrapped_key, ciphertext FROM deposit_versions ORDER BY 1, 2"
    store = storage.Store(split.db_url)
    with store.snapshot() as tx:
        before = [tuple(bytes(v) if isinstance(v, bytes | memoryview) else v for v in r) for r in tx.all(rows)]
    started = a.rekey({"shares": 2, "threshold": 2})
    assert (started["required"], started["shares"], started["threshold"]) == (2, 2, 2)
    with pytest.raises(InvalidRequest, match="in progress|nonce"):
        a.rekey({"nonce": "0" * 32, "share": split.shares[0]})
    assert a.rekey({"nonce": started["nonce"], "share": split.shares[2]})["complete"] is False
    done = a.rekey({"nonce": started["nonce"], "share": split.shares[0]})
    assert done["complete"] is True and len(done["shares"]) == 2
    new = done["shares"]
    with store.snapshot() as tx:  # the deposits were not touched: only the master key's wrapping
        after = [tuple(bytes(v) if isinstance(v, bytes | memoryview) else v for v in r) for r in tx.all(rows)]
    store.dispose()
    assert after == before and before
    a.seal()
    _eventually(lambda: a.seal_status()["sealed"] is True)
    with pytest.raises(Denied, match="not one of this server's current shares"):
        a.unseal(share=split.shares[0])
    a.unseal(share=new[0])
    assert a.unseal(share=new[1])["sealed"] is False
    _eventually(lambda: _unsealed_everywhere(split))
    assert host.get("kept") == b"across the rekey"
    actions = [e["action"] for e in a.audit_tail(-1, 1000)]
    assert actions.count("rekey.start") == 1 and actions.count("rekey") == 1 and "rekey.share" in actions


def test_a_rekey_with_shares_that_do_not_open_the_server_is_refused(split: Deployment) -> None:
    """Shares of this split's identifier that combine to another key cannot be made by accident;
    a forged one is refused by SLIP-39's digest, and the rekey is cancelled."""
    s = split.start(sealed=True)
    a = split.admin(s)
    a.unseal(share=split.shares[0])
    a.unseal(share=split.shares[1])
    started = a.rekey({"shares": 2, "threshold": 2})
    a.rekey({"nonce": started["nonce"], "share": split.shares[0]})
    a.rekey({"cancel": True})
    assert a.rekey_status()["started"] is False
    with pytest.raises(InvalidRequest, match="nonce"):
        a.rekey({"nonce": started["nonce"], "share": split.shares[1]})


def test_cli_init_start_unseal_backup_with_shares(tmp_path: Path) -> None:
    data = tmp_path / "data"
    r = cli("server", "init", "--data", str(data), "--key-shares", "3", "--key-threshold", "2", "--json")
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)["shares"]
    assert len(made) == 3 and json.loads(r.stdout)["seal"] == "2 of 3 shares"
    r = cli("server", "init", "--data", str(tmp_path / "d2"), "--key-shares", "3", "--key-threshold", "1")
    assert r.returncode != 0 and b"threshold" in r.stderr and b"Traceback" not in r.stderr
    two = tmp_path / "two"
    two.write_text(f"# shares 1 and 3\n{made[0]}\n\n{made[2]}\n")
    one = tmp_path / "one"
    one.write_text(made[1] + "\n")
    typo = tmp_path / "typo"
    typo.write_text(_typo(made[1]) + "\n")
    r = cli("server", "audit", "verify", "--data", str(data), "--share-file", str(one))
    assert r.returncode == 1 and b"needed" in r.stderr
    r = cli("server", "audit", "verify", "--data", str(data), "--share-file", str(two))
    assert r.returncode == 0, r.stderr
    r = cli("server", "audit", "verify", "--data", str(data))
    assert r.returncode == 1 and b"--share-file" in r.stderr
    from strongroom.server.datadir import DataDir
    from tests.serverproc import ServerProcess

    d = DataDir(data)
    s = ServerProcess(d)  # no passphrase asked: a share-sealed server starts sealed
    try:
        assert s.wait_healthy()["sealed"] is True
        base = ["server", "unseal", "--data", str(data), "--server", s.url]
        r = cli(*base, "--share-file", str(typo))
        assert r.returncode == 1 and b"checksum" in r.stderr and b"Traceback" not in r.stderr
        r = cli(*base, "--share-file", str(one))
        assert r.returncode == 0 and b"1 of 2 given; 1 more needed" in r.stdout, r.stderr
        r = cli("server", "seal-status", "--data", str(data), "--server", s.url)
        assert b"sealed; seal: 2 of 3 shares; 1 of 2 shares given" in r.stdout
        r = cli(*base, "--share-file", str(two))
        assert r.returncode == 0 and r.stdout.strip() == b"unsealed", r.stderr
        r = cli("server", "backup", "--data", str(data), "--out", str(tmp_path / "b.srb"), "--share-file", str(two))
        assert r.returncode == 0, r.stderr
    finally:
        s.stop()
    r = cli("server", "restore", "--data", str(tmp_path / "r"), "--in", str(tmp_path / "b.srb"), "--share-file", str(one))
    assert r.returncode == 1 and b"needed" in r.stderr
    r = cli("server", "restore", "--data", str(tmp_path / "r"), "--in", str(tmp_path / "b.srb"), "--share-file", str(two))
    assert r.returncode == 0, r.stderr


def test_shares_unseal_a_server_that_two_processes_serve_after_a_process_restart(split: Deployment) -> None:
    """A share given to a process that then dies is gone with it: progress counts what a live
    process can open."""
    s1 = split.start(sealed=True)
    s2 = split.start(sealed=True)
    a1 = split.admin(s1)
    a1.unseal(share=split.shares[0])
    s1.kill()
    a2 = split.admin(s2)
    assert a2.seal_status()["progress"] == 1  # s2 holds its own box of share 1
    assert a2.unseal(share=split.shares[1])["sealed"] is False
    with Client([s2.url], a2.client_id, a2._identity, a2.ca_file) as c:
        _eventually(lambda: c.seal_status()["sealed"] is False)


def test_vault_seal_status_reports_the_split_and_progress(split: Deployment) -> None:
    import hvac

    s = split.start(sealed=True)
    vault = hvac.Client(url=s.url, verify=str(split.data.ca_file))
    status = vault.sys.read_seal_status()
    assert (status["type"], status["t"], status["n"], status["progress"], status["sealed"]) == ("shamir", 2, 3, 0, True)
    split.admin(s).unseal(share=split.shares[1])
    assert vault.sys.read_seal_status()["progress"] == 1
    split.admin(s).unseal(share=split.shares[2])
    status = vault.sys.read_seal_status()
    assert (status["sealed"], status["progress"]) == (False, 0)


def test_a_migration_that_dies_before_its_commit_leaves_the_old_seal(tmp_path: Path) -> None:
    """migrate-seal hands out the new shares inside the transaction, before the commit: a crash
    there (here: the hand-out raising) must leave the old seal whole and the shown shares useless."""
    from strongroom.server import storage
    from strongroom.server.maintenance import migrate_seal, seal_of
    from tests.serverproc import PASSPHRASE

    d = Deployment(tmp_path, None)
    shown: list[str] = []

    def die(made: list[str]) -> None:
        shown.extend(made)
        raise RuntimeError("the power went out")

    with pytest.raises(RuntimeError):
        migrate_seal(d.data, barrier.Unlock(PASSPHRASE), barrier.Unlock(), 3, 2, None, die)
    assert len(shown) == 3 and seal_of(d.data).kind == "passphrase"
    store = storage.Store(d.db_url)
    with store.snapshot() as tx:
        barrier.Barrier().open_with(tx, barrier.Unlock(PASSPHRASE), 1)  # the old passphrase still opens it
        with pytest.raises(barrier.NeedsMaterial, match="a passphrase, not shares"):
            barrier.Barrier().open_with(tx, barrier.Unlock(shares=tuple(shown[:2])), 1)
    store.dispose()
    after = migrate_seal(d.data, barrier.Unlock(PASSPHRASE), barrier.Unlock(), 3, 2, None, lambda made: None)
    assert after.kind == "shares"
    d.close()
