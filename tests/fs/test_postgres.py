"""PostgreSQL keeps its whole cluster on a mount, run as its own user: initdb, pg_ctl start with the
Unix socket directory on the mount too, pgbench -i and a short pgbench run, a restart, and the
data still there, every page's checksum intact.  Everything the server creates belongs to postgres, as on ext4."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fs.mounts import Mount
from tests.pg import _bin

AS_POSTGRES = ["runuser", "-u", "postgres", "--"]


@pytest.fixture
def shared() -> Iterator[Mount]:
    root = Path(tempfile.mkdtemp(prefix="sr-pg-"))
    root.chmod(0o755)
    m = Mount(root).init().start("--allow-other")
    m.mnt.chmod(0o755)
    yield m
    m.stop()
    shutil.rmtree(root)


def run(*argv: str, timeout: float = 180) -> str:
    r = subprocess.run([*AS_POSTGRES, *argv], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{argv[0]} failed: {r.stdout[-2000:]}{r.stderr[-2000:]}"
    return r.stdout


def test_postgres_cluster_and_socket_on_the_mount(shared: Mount) -> None:
    pw = pwd.getpwnam("postgres")
    home = shared.mnt / "pg"
    home.mkdir(mode=0o700)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    data, sock = home / "data", home / "run"
    run(_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--data-checksums")
    run("mkdir", "-m", "0700", str(sock))
    opts = f"-k {sock} -c listen_addresses='' -c fsync=on"
    pg_ctl = [_bin("pg_ctl"), "-D", str(data), "-o", opts, "-l", str(home / "log"), "-w"]
    run(*pg_ctl, "start")
    try:
        socket_file = sock / ".s.PGSQL.5432"
        assert stat.S_ISSOCK(os.lstat(socket_file).st_mode)
        assert os.lstat(socket_file).st_uid == pw.pw_uid
        run(_bin("pgbench"), "-h", str(sock), "-U", "postgres", "-i", "-s", "2", "postgres")
        out = run(_bin("pgbench"), "-h", str(sock), "-U", "postgres", "-c", "4", "-t", "200", "postgres")
        assert "number of failed transactions: 0" in out
        count = run(_bin("psql"), "-h", str(sock), "-U", "postgres", "-Atc", "select count(*) from pgbench_accounts", "postgres")
        assert count.strip() == "200000"
        run(*pg_ctl, "-m", "fast", "restart")
        count = run(_bin("psql"), "-h", str(sock), "-U", "postgres", "-Atc", "select count(*) from pgbench_accounts", "postgres")
        assert count.strip() == "200000"
        run(_bin("psql"), "-h", str(sock), "-U", "postgres", "-Atc", "checkpoint", "postgres")
    finally:
        subprocess.run([*AS_POSTGRES, *pg_ctl, "-m", "fast", "stop"], capture_output=True, timeout=120)
    # every file the server made is its own
    owners = {(p.lstat().st_uid, p.lstat().st_gid) for p in data.rglob("*")}
    assert owners == {(pw.pw_uid, pw.pw_gid)}
    # and every page the server wrote reads back with its own checksum intact
    assert "Bad checksums:  0" in run(_bin("pg_checksums"), "--check", "-D", str(data))
