"""Real programs on a mount (SQLite, tar + diff), durability across SIGKILL, and mounting that
fails clearly: wrong passphrase, missing config, already mounted, a revoked host."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from strongroom.fs import config, mount
from tests.fs.mounts import PASSPHRASE, Mount
from tests.serverproc import Deployment, cli

ROOT = Path(__file__).resolve().parents[2]


def test_sqlite_runs_its_own_workload(vol: Mount) -> None:
    db = vol.mnt / "app.db"
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    for batch in range(20):
        with con:
            con.executemany("INSERT INTO t (v) VALUES (?)", [(f"row {batch}-{i} " * 5,) for i in range(500)])
    with con:
        con.execute("DELETE FROM t WHERE id % 3 = 0")
        con.execute("UPDATE t SET v = 'updated' WHERE id % 7 = 0")
    con.execute("VACUUM")
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    count = con.execute("SELECT count(*) FROM t").fetchone()[0]
    con.close()
    vol.restart()
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == count == 10_000 - 10_000 // 3
    con.close()


def test_tar_extract_and_diff_a_source_tree(vol: Mount, tmp_path: Path) -> None:
    archive = tmp_path / "src.tar"
    subprocess.run(["tar", "cf", str(archive), "-C", str(ROOT), "src", "docs", "tests"], check=True)
    subprocess.run(["tar", "xf", str(archive), "-C", str(vol.mnt)], check=True)
    for d in ("src", "docs", "tests"):
        r = subprocess.run(["diff", "-r", "--no-dereference", str(ROOT / d), str(vol.mnt / d)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-2000:]


def test_fsynced_data_survives_sigkill(vol: Mount) -> None:
    code = (
        "import os,sys\n"
        "fd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT,0o600)\n"
        "os.write(fd,b'durable'*10000); os.fsync(fd)\n"
        "os.mkdir(sys.argv[2]); dfd=os.open(os.path.dirname(sys.argv[2]),os.O_RDONLY); os.fsync(dfd)\n"
        "print('synced', flush=True)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(vol.mnt / "f"), str(vol.mnt / "newdir")], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "synced"
    vol.kill()  # SIGKILL the daemon right after the fsync returned
    vol.start()
    assert (vol.mnt / "f").read_bytes() == b"durable" * 10000
    assert (vol.mnt / "newdir").is_dir() and os.listdir(vol.mnt / "newdir") == []
    (vol.mnt / "newdir" / "inside").write_text("ok")  # its tweak was durable before it was used
    assert os.listdir(vol.mnt / "newdir") == ["inside"]


def test_mount_failures_are_one_clear_line(tmp_path: Path) -> None:
    m = Mount(tmp_path).init()
    bad = tmp_path / "bad.pw"
    bad.write_text("wrong")
    r = cli("fs", "mount", str(m.lower), str(m.mnt), "--passphrase-file", str(bad))
    assert r.returncode != 0 and r.stderr.decode().strip() == "strongroom: error: wrong passphrase"
    r = cli("fs", "mount", str(tmp_path / "nothing"), str(m.mnt), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 2 and b"is not a Strongroom volume" in r.stderr and len(r.stderr.splitlines()) == 1
    cfg = m.lower / "strongroom.volume.json"
    saved = cfg.read_text()
    cfg.write_text(saved.replace('"long_name_max": 175', '"long_name_max": 100'))
    r = cli("fs", "mount", str(m.lower), str(m.mnt), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 2 and b"is damaged: its checksum does not match" in r.stderr
    # a deliberate change that recomputes the checksum is still caught, by the parameters' MAC
    changed = json.loads(saved.replace('"long_name_max": 175', '"long_name_max": 100'))
    changed["checksum"] = config._checksum(changed)
    cfg.write_text(json.dumps(changed))
    r = cli("fs", "mount", str(m.lower), str(m.mnt), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 2 and b"parameters were changed" in r.stderr
    cfg.write_text("{not json")
    r = cli("fs", "mount", str(m.lower), str(m.mnt), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 2 and b"unreadable" in r.stderr
    cfg.write_text(saved)
    # background mount, then the same volume again, then umount
    r = cli("fs", "mount", str(m.lower), str(m.mnt), "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0, r.stderr
    try:
        assert mount.mounted_at(m.mnt) is not None
        other = tmp_path / "other"
        other.mkdir()
        r = cli("fs", "mount", str(m.lower), str(other), "--passphrase-file", str(m.pwfile))
        assert r.returncode == 1 and b"is already mounted at" in r.stderr
    finally:
        r = cli("fs", "umount", str(m.mnt))
    assert r.returncode == 0 and mount.mounted_at(m.mnt) is None
    r = cli("fs", "umount", str(m.mnt))
    assert r.returncode == 1 and b"nothing is mounted" in r.stderr


def test_key_server_volume_mounts_until_the_host_is_revoked(tmp_path: Path) -> None:
    (tmp_path / "srv").mkdir()
    d = Deployment(tmp_path / "srv", None)
    try:
        d.start()
        host = d.register("fs-host")
        profile = str(d.root / "profiles" / "fs-host")
        vol, mnt = tmp_path / "vol", tmp_path / "mnt"
        mnt.mkdir()
        recovery = tmp_path / "recovery.pw"
        recovery.write_text(PASSPHRASE)
        r = cli(
            "fs",
            "init",
            str(vol),
            "--key-server",
            "--deposit",
            "vault-key",
            "--profile",
            profile,
            "--recovery-passphrase-file",
            str(recovery),
            "--json",
        )
        assert r.returncode == 0, r.stderr
        assert host.list()  # the volume's source key is this host's deposit
        r = cli("fs", "mount", str(vol), str(mnt), "--profile", profile)
        assert r.returncode == 0, r.stderr
        (mnt / "x").write_text("kept by the trustee")
        assert cli("fs", "umount", str(mnt)).returncode == 0
        d.admin().set_client_status(host.client_id, "revoke")
        r = cli("fs", "mount", str(vol), str(mnt), "--profile", profile)
        assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and mount.mounted_at(mnt) is None
        assert b"Denied" in r.stderr or b"revoked" in r.stderr, r.stderr  # refused for the revocation
        r = cli("fs", "mount", str(vol), str(mnt), "--passphrase-file", str(recovery), "--profile", str(tmp_path / "no-profile"))
        assert r.returncode == 0, r.stderr  # the recovery passphrase still opens it
        assert (mnt / "x").read_text() == "kept by the trustee"
        cli("fs", "umount", str(mnt))
        d.servers[0].stop()  # the key server is down: the mount fails with one line
        r = cli("fs", "mount", str(vol), str(mnt), "--profile", profile)
        assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and mount.mounted_at(mnt) is None, r.stderr
        assert b"navailable" in r.stderr, r.stderr
    finally:
        if mount.mounted_at(tmp_path / "mnt") is not None:
            subprocess.run(["fusermount3", "-u", str(tmp_path / "mnt")])
        d.close()


def test_key_server_volume_uses_the_servers_it_recorded_or_the_ones_given(tmp_path: Path) -> None:
    """The volume records its deposit's servers: a mount fails over to them when the profile
    names another; --server, given, is the one used (here a dead one: the mount is refused)."""
    (tmp_path / "srv").mkdir()
    d = Deployment(tmp_path / "srv", None)
    try:
        d.start()
        d.register("fs-host")
        profile = d.root / "profiles" / "fs-host"
        vol, mnt = tmp_path / "vol", tmp_path / "mnt"
        mnt.mkdir()
        r = cli("fs", "init", str(vol), "--key-server", "--profile", str(profile), "--json")
        assert r.returncode == 0, r.stderr
        recorded = config.VolumeConfig.load(vol).sources("trustee")[0]["servers"]
        assert recorded == [d.servers[0].url]
        dead = "https://127.0.0.1:9"  # nothing listens on the discard port
        doc = json.loads((profile / "profile.json").read_text())
        doc["servers"] = [dead]  # the profile now names a server that is down
        (profile / "profile.json").write_text(json.dumps(doc))
        r = cli("fs", "mount", str(vol), str(mnt), "--profile", str(profile))
        assert r.returncode == 0, r.stderr  # through the servers the volume recorded
        (mnt / "x").write_text("reached")
        assert cli("fs", "umount", str(mnt)).returncode == 0
        r = cli("fs", "mount", str(vol), str(mnt), "--profile", str(profile), "--server", dead)
        assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and mount.mounted_at(mnt) is None, r.stderr
        r = cli("fs", "cat", str(vol / "x"), "--profile", str(profile), "--server", d.servers[0].url)
        assert r.returncode == 0 and r.stdout == b"reached", r.stderr
        r = cli("fs", "rotate", str(vol), "--profile", str(profile))  # the recorded servers again
        assert r.returncode == 0, r.stderr
        r = cli("fs", "cat", str(vol / "x"), "--profile", str(profile))
        assert r.returncode == 0 and r.stdout == b"reached", r.stderr
    finally:
        if mount.mounted_at(tmp_path / "mnt") is not None:
            subprocess.run(["fusermount3", "-u", str(tmp_path / "mnt")])
        d.close()
