"""The keep-warm helper (fs/warm.py): a lowest-priority child of the mount daemon that spins only
while requests flow, holds no keys, and never outlives the daemon."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.fs.mounts import Mount


def helpers(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except FileNotFoundError:  # a thread of the daemon that ended meanwhile
            continue
        out += [int(c) for c in children]
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":  # exited, not yet reaped by its (dead) parent's reaper
            return True
        time.sleep(0.05)
    return False


def test_helper_spins_only_while_busy_and_exits_with_the_unmount(vol: Mount) -> None:
    assert vol.proc is not None
    (helper,) = helpers(vol.proc.pid)
    deadline = time.monotonic() + 10  # the helper lowers its own priority once its interpreter is up
    while os.getpriority(os.PRIO_PROCESS, helper) != 19 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert os.getpriority(os.PRIO_PROCESS, helper) == 19
    cmdline = Path(f"/proc/{helper}/cmdline").read_bytes()
    assert b"strongroom" not in cmdline and b"passphrase" not in cmdline  # a bare interpreter, no keys
    time.sleep(0.3)
    idle = cpu_seconds(helper)
    time.sleep(1.0)
    assert cpu_seconds(helper) - idle < 0.1  # asleep while nothing happens
    busy = cpu_seconds(helper)
    # Awake while requests flow.  It spins at nice 19, so on a machine busy with other work it
    # may get little of a second: keep the requests flowing until it has had 0.2 s, for up to 10.
    deadline = time.monotonic() + 10.0
    n = 0
    while cpu_seconds(helper) - busy < 0.2 and time.monotonic() < deadline:
        for _ in range(100):
            try:
                os.stat(vol.mnt / f"missing-{n}")
            except FileNotFoundError:
                pass
            n += 1
    assert cpu_seconds(helper) - busy >= 0.2
    vol.stop()
    assert wait_gone(helper)


def _settled_helper(vol: Mount) -> int:
    assert vol.proc is not None
    (helper,) = helpers(vol.proc.pid)
    deadline = time.monotonic() + 10
    while os.getpriority(os.PRIO_PROCESS, helper) != 19 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # past the window of the mount's own first requests
    return helper


def test_a_database_s_commits_do_not_wake_the_helper(vol: Mount) -> None:
    """In-place page rewrites and fsyncs (the compiled fast path) come from many processes at once
    on a busy machine: a spinning helper would only take their CPU time."""
    page = os.urandom(8192)
    fd = os.open(vol.mnt / "wal", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        for i in range(64):
            os.pwrite(fd, page, i * 8192)
        os.fsync(fd)
        helper = _settled_helper(vol)
        before, n = cpu_seconds(helper), 0
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            os.pwrite(fd, page, (n % 64) * 8192)
            os.fdatasync(fd)
            n += 1
    finally:
        os.close(fd)
    assert n > 100
    assert cpu_seconds(helper) - before < 0.15


def test_a_few_requests_now_and_then_do_not_wake_the_helper(vol: Mount) -> None:
    helper = _settled_helper(vol)
    before, n = cpu_seconds(helper), 0
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:  # about one request every 2 ms: not a stream
        try:
            os.stat(vol.mnt / f"missing-{n}")  # a new name each time: no cached negative entry
        except FileNotFoundError:
            pass
        n += 1
        time.sleep(0.002)
    assert n > 100
    assert cpu_seconds(helper) - before < 0.15


def test_helper_dies_with_a_killed_daemon(vol: Mount) -> None:
    assert vol.proc is not None
    (helper,) = helpers(vol.proc.pid)
    vol.kill()
    assert wait_gone(helper)


def test_no_keep_warm_starts_no_helper(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start("--no-keep-warm")
    try:
        assert m.proc is not None
        assert helpers(m.proc.pid) == []
        (m.mnt / "f").write_text("still works")
        assert (m.mnt / "f").read_text() == "still works"
    finally:
        m.stop()
