"""Access rules across pid namespaces, made with unshare(1) as container runtimes make them
(docs/ACL.md, "Containers").  FUSE reports a caller outside the mount's pid namespace as pid 0,
which the daemon once took for the kernel's own request and let through unchecked."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strongroom.fs import mount
from tests.fs.mounts import Mount
from tests.serverproc import cli

CAT, HEAD = "/usr/bin/cat", "/usr/bin/head"
pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")


@pytest.fixture
def vol(tmp_path: Path) -> Iterator[Mount]:
    m = Mount(tmp_path).init().start()
    (m.mnt / "data").write_text("secret rows\n")
    m.stop()
    r = cli("acl", "add", str(m.lower), "--allow", CAT, "--mode", "r", "--passphrase-file", str(m.pwfile))
    assert r.returncode == 0, r.stderr
    yield m
    m.stop()


def _mount_argv(m: Mount) -> list[str]:
    return [sys.executable, "-m", "strongroom.cli.main", "fs", "mount", str(m.lower), str(m.mnt), "--foreground"] + [
        "--passphrase-file",
        str(m.pwfile),
    ]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)


def _wait_mounted(mnt: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while mount.mounted_at(mnt) is None:
        assert proc.poll() is None, f"the daemon exited {proc.returncode}"
        assert time.monotonic() < deadline, "the mount did not come up"
        time.sleep(0.05)


def test_daemon_on_the_host_serving_callers_in_a_container(vol: Mount) -> None:
    vol.start()
    data = str(vol.mnt / "data")
    r = _run("unshare", "--pid", "--fork", "--mount-proc", CAT, data)
    assert r.returncode == 0 and r.stdout == "secret rows\n", r.stderr
    r = _run("unshare", "--pid", "--fork", "--mount-proc", HEAD, data)
    assert r.returncode != 0 and "Permission denied" in r.stderr and "secret" not in r.stdout


def test_daemon_and_callers_in_one_container(vol: Mount) -> None:
    data = vol.mnt / "data"
    script = (
        f"{' '.join(_mount_argv(vol))} >>{vol.log} 2>&1 & "
        f"for i in $(seq 300); do mountpoint -q {vol.mnt} && break; sleep 0.1; done; "
        f"mountpoint -q {vol.mnt} || exit 9; "
        f"{CAT} {data}; echo cat=$?; {HEAD} {data}; echo head=$?; fusermount3 -u {vol.mnt}; wait"
    )
    r = _run("unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", script)
    assert "cat=0" in r.stdout and r.stdout.count("secret rows") == 1, r.stdout + r.stderr
    assert "head=1" in r.stdout and "Permission denied" in r.stderr


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A directory whose mounts propagate between the host and a new mount namespace."""
    d = tmp_path / "shared"
    d.mkdir()
    subprocess.run(["mount", "--bind", str(d), str(d)], check=True)
    subprocess.run(["mount", "--make-shared", str(d)], check=True)
    yield d
    subprocess.run(["umount", "-l", str(d)], check=False)


@pytest.mark.parametrize("own_proc", [True, False], ids=["its-own-proc", "the-hosts-proc"])
def test_daemon_in_a_container_serving_the_host_denies_everyone(vol: Mount, shared: Path, own_proc: bool) -> None:
    """The host's callers are invisible from the daemon's pid namespace (pid 0); with the host's
    /proc left in the container, pids would name the wrong processes.  Both fail closed."""
    vol.mnt = shared / "mnt"
    vol.mnt.mkdir()
    ns = ["unshare", "--pid", "--fork"] + (["--mount-proc", "--propagation", "unchanged"] if own_proc else [])
    with open(vol.log, "ab") as log:
        proc = subprocess.Popen(ns + _mount_argv(vol), stdout=log, stderr=log)
    try:
        _wait_mounted(vol.mnt, proc)
        for program in (CAT, HEAD):  # cat is allowed, but nobody can tell that this is cat
            r = _run(program, str(vol.mnt / "data"))
            assert r.returncode != 0 and "Permission denied" in r.stderr and "secret" not in r.stdout, program
    finally:
        subprocess.run(["fusermount3", "-u", str(vol.mnt)], capture_output=True)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    why = "outside the daemon's pid namespace" if own_proc else "/proc is not this pid namespace's"
    log_text = vol.log.read_text()
    assert why in log_text and log_text.count(why) <= 2  # rate-limited, not one line per request
