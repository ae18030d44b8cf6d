"""Process accounting for benchmarks: CPU seconds and peak RSS of process trees, from /proc."""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def children_of(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(p.name))
    return out


def tree(pid: int) -> list[int]:
    pids = [pid]
    for c in children_of(pid):
        pids += tree(c)
    return pids


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class CpuWindow:
    """CPU used by a server tree and by this process's finished children over a window."""

    server_pids: list[int]

    def __enter__(self) -> CpuWindow:
        self._t = time.perf_counter()
        self._server = cpu_seconds(self.server_pids)
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._children = ru.ru_utime + ru.ru_stime
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self._self = ru.ru_utime + ru.ru_stime
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._t
        self.server_cpu = cpu_seconds(self.server_pids) - self._server
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.children_cpu = ru.ru_utime + ru.ru_stime - self._children
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.self_cpu = ru.ru_utime + ru.ru_stime - self._self
