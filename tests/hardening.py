"""What a hardened key-holding process looks like from outside (strongroom.crypto.hygiene)."""

from __future__ import annotations

from pathlib import Path


def hardened(pid: int) -> None:
    """No core dumps (RLIMIT_CORE 0) and some memory locked against swap, read from /proc."""
    limits = Path(f"/proc/{pid}/limits").read_text()
    core = next(line for line in limits.splitlines() if line.startswith("Max core file size")).split()
    assert core[4:6] == ["0", "0"], limits
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    assert int(status["VmLck"].split()[0]) > 0, status["VmLck"]
