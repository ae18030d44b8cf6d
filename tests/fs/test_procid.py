"""The access checks' process identity: the compiled reader and the Python one agree, also for a
command name with spaces and parentheses, and a gone process has none."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from strongroom.fs import procid


def test_the_compiled_reader_is_built() -> None:
    assert procid._lib() is not None, "scripts/install.sh builds libsrproc.so"


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
