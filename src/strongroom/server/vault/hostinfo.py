"""``sys/host-info``: the host's CPUs, CPU times, disks, memory and identity, in the fields Vault
answers with (its gopsutil names), read from /proc and the standard library.  Vault asks for
``sudo`` on the path; so does the route (vault/routes.py)."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from strongroom.server.vault.tokens import iso

_CLK = os.sysconf("SC_CLK_TCK")


def describe() -> dict[str, Any]:
    return {
        "cpu": _cpus(),
        "cpu_times": _cpu_times(),
        "disk": _disks(),
        "host": _host(),
        "memory": _memory(),
        "timestamp": iso(time.time()),
    }


def _cpus() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        blocks = Path("/proc/cpuinfo").read_text().strip().split("\n\n")
    except OSError:
        return out
    for block in blocks:
        f = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        f = {k.strip(): v.strip() for k, v in f.items()}
        out.append(
            {
                "cpu": int(f["processor"]) if f.get("processor", "").isdigit() else len(out),
                "vendorId": f.get("vendor_id", ""),
                "family": f.get("cpu family", ""),
                "model": f.get("model", ""),
                "stepping": int(f["stepping"]) if f.get("stepping", "").isdigit() else 0,
                "physicalId": f.get("physical id", ""),
                "coreId": f.get("core id", ""),
                "cores": 1,
                "modelName": f.get("model name", ""),
                "mhz": float(f.get("cpu MHz", "0") or 0),
                "cacheSize": int((f.get("cache size", "0").split() or ["0"])[0] or 0),
                "flags": f.get("flags", "").split(),
                "microcode": f.get("microcode", ""),
            }
        )
    return out


def _cpu_times() -> list[dict[str, Any]]:
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guestNice")
    try:
        stat = Path("/proc/stat").read_text().splitlines()
        lines = [ln.split() for ln in stat if ln.startswith("cpu") and not ln.startswith("cpu ")]  # per CPU, not the sum
    except OSError:
        return []
    return [{"cpu": p[0], **{n: int(v) / _CLK for n, v in zip(names, p[1:], strict=False)}} for p in lines]


def _disks() -> list[dict[str, Any]]:
    try:
        usage = shutil.disk_usage("/")
        st = os.statvfs("/")
    except OSError:
        return []
    used = usage.total - usage.free
    inodes_used = st.f_files - st.f_ffree
    return [
        {
            "path": "/",
            "fstype": "",
            "total": usage.total,
            "free": usage.free,
            "used": used,
            "usedPercent": 100.0 * used / usage.total if usage.total else 0.0,
            "inodesTotal": st.f_files,
            "inodesUsed": inodes_used,
            "inodesFree": st.f_ffree,
            "inodesUsedPercent": 100.0 * inodes_used / st.f_files if st.f_files else 0.0,
        }
    ]


def _host() -> dict[str, Any]:
    try:
        uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        uptime = 0
    os_release = platform.freedesktop_os_release() if hasattr(platform, "freedesktop_os_release") else {}
    return {
        "hostname": socket.gethostname(),
        "uptime": uptime,
        "bootTime": int(time.time()) - uptime,
        "procs": sum(1 for d in os.listdir("/proc") if d.isdigit()),
        "os": platform.system().lower(),
        "platform": os_release.get("ID", ""),
        "platformFamily": os_release.get("ID_LIKE", os_release.get("ID", "")),
        "platformVersion": os_release.get("VERSION_ID", ""),
        "kernelVersion": platform.release(),
        "kernelArch": platform.machine(),
        "virtualizationSystem": "",
        "virtualizationRole": "",
        "hostid": "",
    }


def _memory() -> dict[str, Any]:
    kb: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            kb[name] = int(rest.split()[0]) * 1024 if rest.split() else 0
    except (OSError, ValueError):
        return {}
    total, available = kb.get("MemTotal", 0), kb.get("MemAvailable", 0)
    return {
        "total": total,
        "available": available,
        "used": total - available,
        "usedPercent": 100.0 * (total - available) / total if total else 0.0,
        "free": kb.get("MemFree", 0),
        "active": kb.get("Active", 0),
        "inactive": kb.get("Inactive", 0),
        "buffers": kb.get("Buffers", 0),
        "cached": kb.get("Cached", 0),
        "shared": kb.get("Shmem", 0),
        "swapTotal": kb.get("SwapTotal", 0),
        "swapFree": kb.get("SwapFree", 0),
    }
