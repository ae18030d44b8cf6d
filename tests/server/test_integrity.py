"""Tampering with the database: swapped or edited deposit rows fail to decrypt; audit edits are caught."""

from __future__ import annotations

import json

import pytest

from strongroom.client.errors import IntegrityError
from strongroom.server import storage
from tests.serverproc import Deployment, cli


def _verify(d: Deployment) -> tuple[int, dict]:
    r = cli("server", "audit", "verify", "--data", str(d.data.path), "--passphrase-file", str(d.pwfile), "--json")
    return r.returncode, json.loads(r.stdout or b"{}")


def _rows(d: Deployment) -> storage.Store:
    return storage.Store(d.db_url)


def test_swapped_or_edited_deposit_rows_do_not_decrypt(running: Deployment) -> None:
    a, b = running.register("a"), running.register("b")
    a.put("ka", b"alpha secret")
    b.put("kb", b"bravo secret")
    store = _rows(running)
    with store.exclusive() as tx:
        rows = {
            r[0]: (bytes(r[1]), bytes(r[2])) for r in tx.all("SELECT deposit_id, ciphertext, wrapped_key FROM deposit_versions")
        }
        ida, idb = sorted(rows)
        # move b's whole version row (ciphertext and wrapped key) under a's deposit
        tx.run("UPDATE deposit_versions SET ciphertext = ?, wrapped_key = ? WHERE deposit_id = ?", *rows[idb], ida)
    with pytest.raises(IntegrityError):
        a.get("ka")
    with store.exclusive() as tx:  # flip one ciphertext bit of b's deposit
        ct = bytearray(rows[idb][0])
        ct[20] ^= 1
        tx.run("UPDATE deposit_versions SET ciphertext = ? WHERE deposit_id = ?", bytes(ct), idb)
    with pytest.raises(IntegrityError):
        b.get("kb")
    with store.exclusive() as tx:  # restore b, then hand b's deposit to a by editing the owner column
        tx.run("UPDATE deposit_versions SET ciphertext = ? WHERE deposit_id = ?", rows[idb][0], idb)
    assert b.get("kb") == b"bravo secret"
    with store.exclusive() as tx:
        tx.run("UPDATE deposits SET owner_id = ?, name = 'stolen' WHERE id = ?", a.client_id, idb)
    with pytest.raises(IntegrityError):
        a.get("stolen")
    store.dispose()
    assert running.admin().list_clients()  # the server stays healthy
    failures = [e for e in running.admin().audit_tail(-1, 1000) if e["outcome"] == "error"]
    assert len(failures) == 3
    # failed integrity checks do not consume retrievals
    assert [d["retrievals"] for d in a.list() if d["name"] == "ka"] == [0]


def _setup_log(d: Deployment) -> None:
    c = d.register()
    for i in range(4):
        c.put(f"k{i}", b"v")
    code, out = _verify(d)
    assert code == 0 and out["ok"], out


def test_audit_edit_detected(running: Deployment) -> None:
    _setup_log(running)
    store = _rows(running)
    with store.exclusive() as tx:
        tx.run("UPDATE audit SET detail = ? WHERE seq = 4", '{"bytes":1,"version":9}')
    store.dispose()
    code, out = _verify(running)
    assert code == 1 and out["first_bad"] == 4


def test_audit_removal_detected(running: Deployment) -> None:
    _setup_log(running)
    store = _rows(running)
    with store.exclusive() as tx:
        tx.run("DELETE FROM audit WHERE seq = 3")
    store.dispose()
    code, out = _verify(running)
    assert code == 1 and out["first_bad"] == 3 and "missing" in out["reason"]


def test_audit_reorder_detected(running: Deployment) -> None:
    _setup_log(running)
    store = _rows(running)
    cols = "ts, actor, action, target, outcome, detail, mac"
    with store.exclusive() as tx:
        r3, r4 = (tx.one(f"SELECT {cols} FROM audit WHERE seq = ?", s) for s in (3, 4))
        update = "UPDATE audit SET ts = ?, actor = ?, action = ?, target = ?, outcome = ?, detail = ?, mac = ? WHERE seq = ?"
        tx.run(update, *r4, 3)
        tx.run(update, *r3, 4)
    store.dispose()
    code, out = _verify(running)
    assert code == 1 and out["first_bad"] == 3


@pytest.mark.parametrize("cut", [1, 2])
def test_audit_truncation_detected_by_data_dir_head(running: Deployment, cut: int) -> None:
    """Cutting even the one entry answered last shows: the idle server settled its head file."""
    _setup_log(running)
    running.servers[0].stop()
    store = _rows(running)
    with store.exclusive() as tx:
        last = tx.value("SELECT seq FROM audit_head")
        keep = tx.one("SELECT seq, mac FROM audit WHERE seq = ?", last - cut)
        tx.run("DELETE FROM audit WHERE seq > ?", last - cut)
        tx.run("UPDATE audit_head SET seq = ?, mac = ?", *keep)  # a consistent-looking database
    store.dispose()
    code, out = _verify(running)
    assert code == 1 and "truncated" in out["reason"]


def test_no_secret_in_audit_or_logs(running: Deployment) -> None:
    c = running.register()
    secret = b"TOPSECRET-" + b"q" * 20
    c.put("k", secret)
    c.get("k")
    entries = json.dumps(running.admin().audit_tail(-1, 1000))
    assert "TOPSECRET" not in entries and running.secret not in entries
    running.servers[0].stop()
    log_text = b"".join(p.read_bytes() for p in running.root.glob("server-*.log"))
    assert b"TOPSECRET" not in log_text and running.secret.encode() not in log_text
    # nor anywhere in the database file in plaintext (SQLite only: a file we can read)
    db = running.data.path / "strongroom.db"
    if db.exists():
        raw = b"".join(p.read_bytes() for p in running.data.path.glob("strongroom.db*"))
        assert b"TOPSECRET" not in raw
