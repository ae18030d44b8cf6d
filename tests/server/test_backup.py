"""Backups taken while serving, restored into an empty data dir; the audit chain verifies across it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from strongroom.client import Client
from tests.serverproc import Deployment, cli

# long enough that random ciphertext never contains them by chance (a three-byte b"one" did, in CI)
ONE = b"first version of k1, plaintext marker"
TWO = b"second version of k1, plaintext marker"
SHARED = b"shared with group g, plaintext marker"


def test_backup_restore_round_trip(running: Deployment, tmp_path: Path) -> None:
    a = running.register("a")
    b = running.register("b")
    running.admin().create_group("default", "g")
    running.admin().change_group("default", "g", add=[b.client_id])
    a.put("k1", ONE)
    a.put("k1", TWO)
    a.put("shared", SHARED, readers=["group:g"], max_retrievals=3)
    assert b.get("shared", owner=a.client_id) == SHARED
    running.admin().rotate_master_key()

    # keep writing while the backup runs: it must still be a consistent snapshot
    stop = threading.Event()

    def busy() -> None:
        i = 0
        while not stop.is_set():
            a.put(f"busy{i}", b"x")
            i += 1

    t = threading.Thread(target=busy)
    t.start()
    out = tmp_path / "backup.srb"
    r = cli(
        "server",
        "backup",
        "--data",
        str(running.data.path),
        "--out",
        str(out),
        "--passphrase-file",
        str(running.pwfile),
        "--json",
    )
    stop.set()
    t.join()
    assert r.returncode == 0, r.stderr
    assert out.stat().st_mode & 0o077 == 0
    backup = out.read_bytes()
    assert ONE not in backup and TWO not in backup and SHARED not in backup

    restored = tmp_path / "restored"
    r = cli("server", "restore", "--data", str(restored), "--in", str(out), "--passphrase-file", str(running.pwfile), "--json")
    assert r.returncode == 0, r.stderr
    # the restored server is a separate deployment on its own SQLite database
    running.servers[0].stop()
    from strongroom.server.datadir import DataDir
    from tests.serverproc import ServerProcess

    s = ServerProcess(DataDir(restored), 1, False, running.pwfile)
    try:
        a2 = Client([s.url], a.client_id, a._identity, restored / "tls" / "ca.pem")
        b2 = Client([s.url], b.client_id, b._identity, restored / "tls" / "ca.pem")
        assert a2.get("k1") == TWO and a2.get("k1", version=1) == ONE
        assert b2.get("shared", owner=a.client_id) == SHARED
        assert {d["name"] for d in a2.list()} >= {"k1", "shared"}
        assert [d["retrievals"] for d in a2.list() if d["name"] == "shared"] == [2]  # one before the backup, one now
        a2.put("after-restore", b"new")
        v = cli("server", "audit", "verify", "--data", str(restored), "--passphrase-file", str(running.pwfile), "--json")
        assert v.returncode == 0, v.stdout + v.stderr
        assert json.loads(v.stdout)["ok"]
        admin = Client([s.url], *_admin(restored))
        actions = [e["action"] for e in admin.audit_tail(-1, 1000)]
        assert "restore" in actions and actions.index("restore") < actions.index("put", actions.index("restore"))
        for c in (a2, b2, admin):
            c.close()
    finally:
        s.stop()


def _admin(data: Path) -> tuple:
    from strongroom.client.profile import Profile

    p = Profile.load(data / "admin")
    return p.client_id, p.identity, p.ca_file


def test_restore_refuses_bad_input(running: Deployment, tmp_path: Path) -> None:
    running.register().put("k", b"v")
    out = tmp_path / "b.srb"
    r = cli("server", "backup", "--data", str(running.data.path), "--out", str(out), "--passphrase-file", str(running.pwfile))
    assert r.returncode == 0, r.stderr
    blob = out.read_bytes()
    wrong = tmp_path / "wrong"
    wrong.write_text("not it")
    cases = {
        "truncated": (blob[:-10], running.pwfile, b"truncated"),
        "flipped": (blob[:-40] + bytes([blob[-40] ^ 1]) + blob[-39:], running.pwfile, b"failed authentication"),
        "wrong passphrase": (blob, wrong, b"wrong passphrase"),
        "not a backup": (b"hello", running.pwfile, b"not a Strongroom backup"),
    }
    for i, (name, (data, pw, message)) in enumerate(cases.items()):
        f = tmp_path / f"case{i}"
        f.write_bytes(data)
        target = tmp_path / f"target{i}"
        r = cli("server", "restore", "--data", str(target), "--in", str(f), "--passphrase-file", str(pw))
        assert r.returncode == 1, name
        assert message in r.stderr, (name, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = cli("server", "restore", "--data", str(running.data.path), "--in", str(out), "--passphrase-file", str(running.pwfile))
    assert r.returncode == 1 and b"not empty" in r.stderr
