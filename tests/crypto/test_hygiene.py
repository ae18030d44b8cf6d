"""Key-holding processes keep their memory to themselves: no core dumps, not dumpable (so the same
user cannot ptrace them or read /proc/PID/mem or environ), pages locked against swap.  Checked on
the running daemons (the server's processes, the mount daemon, the entropy feeder) through
/proc/PID/status and /proc/PID/limits (the feeder's in tests/rng/test_feed.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fs.mounts import Mount
from tests.hardening import hardened
from tests.serverproc import Deployment

NOBODY = 65534


def test_a_non_dumpable_process_hides_its_memory_from_its_own_user() -> None:
    drop = f"import os, sys, time\nos.setgid({NOBODY})\nos.setuid({NOBODY})\n"
    # imported before the drop: nobody may not be able to read the interpreter's library
    code = (
        "from strongroom.crypto.hygiene import harden_process\n" + drop + "print(harden_process(), flush=True)\ntime.sleep(30)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        # as nobody the memory lock is refused (RLIMIT_MEMLOCK), and said so; the rest holds
        assert "RLIMIT_MEMLOCK" in line and "dumpable" not in line and "core" not in line, line
        # a dumpable process's /proc files belong to its user; a non-dumpable one's to root
        assert os.stat(f"/proc/{child.pid}/environ").st_uid == 0
        assert os.stat(f"/proc/{child.pid}").st_uid == NOBODY
        reader = subprocess.run(
            [sys.executable, "-c", drop + f"open('/proc/{child.pid}/environ').read()"],
            capture_output=True,
            text=True,
        )
        assert reader.returncode != 0 and "Permission denied" in reader.stderr
    finally:
        child.kill()
        child.wait()


def test_server_processes_are_hardened(deployment: Deployment) -> None:
    server = deployment.start(workers=2)
    pids = server.pids()
    assert len(pids) >= 4  # the parent, the writer and two workers
    for pid in pids:
        hardened(pid)


def test_the_mount_daemon_is_hardened(tmp_path: Path) -> None:
    m = Mount(tmp_path).init().start()
    try:
        assert m.proc is not None
        hardened(m.proc.pid)
    finally:
        m.stop()
