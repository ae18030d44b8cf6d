"""The access checks' process identity: the compiled reader and the Python one agree, also for a
command name with spaces and parentheses, and a gone process has none."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from strongroom.fs import procid


def test_the_compiled_reader_is_built() -> None:
    assert procid._lib() is not None, "the package build (setup.py) builds libsrproc.so"


def test_compiled_and_python_agree_on_odd_command_names(tmp_path: Path) -> None:
    odd = tmp_path / "a) b (c) 9 9"  # /proc/PID/stat's name field ends at the last ')'
    shutil.copy2("/usr/bin/sleep", odd)
    proc = subprocess.Popen([str(odd), "30"])
    try:
        c, py = procid.identity(proc.pid), procid.identity_py(proc.pid)
        assert c is not None and c == py
        st = os.stat(odd)
        assert c[0] == proc.pid and c[8] == os.getpid()  # its parent: this test
        assert c[2:7] == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        assert c[7] == os.getuid()
        me = procid.identity(os.getpid())
        assert me is not None and c[1] >= me[1] > 0  # started after this test's process
    finally:
        proc.kill()
        proc.wait()
    assert procid.identity(proc.pid) is None and procid.identity_py(proc.pid) is None


@pytest.mark.parametrize("read", [procid.identity, procid.identity_py])
def test_an_exec_changes_the_identity(read: Callable[[int], tuple[int, ...] | None], tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text("read line\nexec /usr/bin/sleep 30\n")
    proc = subprocess.Popen(["/usr/bin/bash", str(script)], stdin=subprocess.PIPE)
    try:
        before = read(proc.pid)
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        for _ in range(200):
            after = read(proc.pid)
            if after != before:
                break
            time.sleep(0.01)
        assert before is not None and after is not None
        assert after[:2] == before[:2] and after[2:7] != before[2:7]  # same pid and start, new image
    finally:
        proc.kill()
        proc.wait()


Reader = Callable[[int], tuple[int, ...] | None]


def _wait_change(read: Reader, pid: int, before: tuple[int, ...] | None) -> tuple[int, ...] | None:
    after = before
    for _ in range(300):
        after = read(pid)
        if after != before:
            break
        time.sleep(0.01)
    return after


def test_tracker_sees_an_exec_a_setuid_and_an_exit(tmp_path: Path) -> None:
    """The cached fast path (pidfd liveness, executable and uid re-checked) never returns what the
    full read would not."""
    tracker = procid.Tracker(limit=2)
    script = tmp_path / "s.py"
    script.write_text(
        "import os, sys\n"
        "sys.stdin.readline()\n"
        "os.setuid(65534)\n"  # the tests run as root
        "sys.stdin.readline()\n"
        "os.execv('/usr/bin/sleep', ['sleep', '30'])\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE)
    others = [subprocess.Popen(["/usr/bin/sleep", "30"]) for _ in range(2)]
    try:
        assert proc.stdin is not None
        first = tracker.identity(proc.pid)
        assert first is not None and first == procid.identity(proc.pid)
        assert tracker.identity(proc.pid) == first  # the fast path, same answer
        for o in others:  # over the limit: the cache is emptied, answers stay right
            assert tracker.identity(o.pid) == procid.identity(o.pid)
        assert tracker.identity(proc.pid) == first
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        after_setuid = _wait_change(tracker.identity, proc.pid, first)
        assert after_setuid is not None and after_setuid[7] == 65534 and after_setuid == procid.identity(proc.pid)
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        after_exec = _wait_change(tracker.identity, proc.pid, after_setuid)
        assert after_exec is not None and after_exec[2:7] != first[2:7] and after_exec == procid.identity(proc.pid)
    finally:
        for p in (proc, *others):
            p.kill()
            p.wait()
    assert tracker.identity(proc.pid) is None


def test_tracker_takes_thread_ids() -> None:
    """FUSE reports the calling thread's id; a thread that is not the process leader is tracked too."""
    tracker = procid.Tracker()
    ready, done = threading.Event(), threading.Event()
    tid: list[int] = []

    def run() -> None:
        tid.append(threading.get_native_id())
        ready.set()
        done.wait()

    t = threading.Thread(target=run)
    t.start()
    try:
        ready.wait(5)
        assert tid[0] != os.getpid()
        assert tracker.identity(tid[0]) == procid.identity(tid[0]) is not None
        assert tracker.identity(tid[0]) == procid.identity(tid[0])
    finally:
        done.set()
        t.join()
