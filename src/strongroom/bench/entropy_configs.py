"""The zTrustee case study's entropy configurations on this kernel (issue 6): the case study's
single-client script (one registration timed, registrations completed in a window, put and get
latency of a deposit, 1000-byte entropy latency and entropy requests completed in a window) run
against one Strongroom server with nothing extra, with haveged running, with
`strongroom rng feed --source rdrand` running (the case study's rngd + RDRAND), and with both.
Beside each: the cost of a 32-byte getrandom(2) (C loop), the kernel's entropy_avail, and the CPU
the feeding daemon used.

    strongroom bench --only entropy [--quick] [--out DIR]
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom.bench.keyserver import VALUE32, Strongroom, median_ms
from strongroom.bench.procs import cpu_seconds
from strongroom.bench.rng import c_getrandom
from strongroom.client import Client
from strongroom.rng.sources import SourceUnavailable, open_source

ENTROPY_AVAIL = Path("/proc/sys/kernel/random/entropy_avail")
FEED = ["rng", "feed", "--source", "rdrand", "--foreground", "--interval", "1"]


def _entropy_avail() -> int | None:
    try:
        return int(ENTROPY_AVAIL.read_text())
    except (OSError, ValueError):
        return None


def _completed(fn: Callable[[], object], seconds: float) -> float:
    """Operations completed per second over a window, one after another (the case study's loop)."""
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        done += 1
    return round(done / (time.perf_counter() - t0), 1)


def _already_running() -> list[str]:
    found = []
    for name in ("haveged", "rngd", "jitterentropy-rngd"):
        if subprocess.run(["pgrep", "-x", name], capture_output=True).returncode == 0:
            found.append(name)
    return found


class _Daemons:
    """Starts the configuration's entropy daemons and stops them again."""

    def __init__(self, config: str) -> None:
        self.config = config
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> _Daemons:
        if "haveged" in self.config:
            self.procs.append(subprocess.Popen(["haveged", "-F"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        if "rdrand" in self.config:
            cmd = [sys.executable, "-m", "strongroom.cli.main", *FEED]
            self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        time.sleep(1.0)  # let them start (and fail, if they will)
        for p in self.procs:
            if p.poll() is not None:
                assert p.stderr is not None
                err = p.stderr.read().decode(errors="replace").strip().splitlines()
                name = str(p.args[0]) if isinstance(p.args, list) else "daemon"
                raise RuntimeError(f"{name}: exited: {err[-1] if err else p.returncode}")
        self.cpu0 = cpu_seconds([p.pid for p in self.procs])
        return self

    def cpu(self) -> float:
        return round(cpu_seconds([p.pid for p in self.procs]) - self.cpu0, 3)

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _measure(s: Strongroom, root: Path, seconds: float, n: int) -> dict[str, Any]:
    c = s.client
    counter = [0]

    def register() -> None:
        counter[0] += 1
        prof = root / "profiles" / str(counter[0])
        Client.register([s.url], s.org, s.secret, "case-study", prof, s.data.ca_file).close()
        shutil.rmtree(prof)  # the case study removed the local configuration each time

    return {
        "register_ms": median_ms(register, max(5, n // 4)),
        "registrations_per_s": _completed(register, seconds),
        "put_ms": median_ms(lambda: c.put("case-study", VALUE32), n),
        "get_ms": median_ms(lambda: c.get("case-study"), n),
        "entropy_1000B_ms": median_ms(lambda: c.entropy(1000), n),
        "entropy_per_s": _completed(lambda: c.entropy(1000), seconds),
    }


def run(quick: bool = False, progress: Callable[[str], None] = print) -> dict[str, Any]:
    seconds = 1.0 if quick else 20.0
    n = 10 if quick else 200
    configs = ["nothing extra", "haveged", "rng feed rdrand", "haveged + rng feed rdrand"]
    report: dict[str, Any] = {
        "quick": quick,
        "window_s": seconds,
        "samples": n,
        "kernel": os.uname().release,
        "feed_command": "strongroom " + " ".join(FEED),
        "rows": [],
        "missing": [],
        "notes": [],
    }
    running = _already_running()
    if running:
        report["notes"].append(f"already running before the bench, in every configuration: {', '.join(running)}")
    if os.geteuid() != 0:
        report["missing"].append("not root: haveged and rng feed cannot add to the kernel pool; only the baseline is measured")
        configs = configs[:1]
    if shutil.which("haveged") is None:
        report["missing"].append("haveged (apt-get install haveged)")
        configs = [c for c in configs if "haveged" not in c]
    try:
        open_source("rdrand", None).close()
    except SourceUnavailable as e:
        report["missing"].append(f"rdrand: {e}")
        configs = [c for c in configs if "rdrand" not in c]
    with tempfile.TemporaryDirectory(prefix="strongroom-entropy-bench-") as tmp:
        root = Path(tmp)
        s = Strongroom(root / "server", workers=2)
        try:
            s.client.put("case-study", VALUE32)
            for config in configs:
                progress(config)
                try:
                    with _Daemons(config) as daemons:
                        before = _entropy_avail()
                        floor = c_getrandom(20_000 if quick else 200_000, 1)
                        row = {"config": config, **_measure(s, root, seconds, n)}
                        row["getrandom_32B_ns"] = floor["ns_per_key"] if floor else None
                        row["entropy_avail_before"], row["entropy_avail_after"] = before, _entropy_avail()
                        row["daemon_cpu_s"] = daemons.cpu()
                        report["rows"].append(row)
                except RuntimeError as e:
                    report["missing"].append(f"{config}: {e}")
        finally:
            s.stop()
    return report


def table(report: dict[str, Any]) -> str:
    lines = [
        f"kernel {report['kernel']}, one client, windows of {report['window_s']} s, medians of {report['samples']}",
        "",
        "| configuration | register ms | registrations /s | put ms | get ms | entropy 1000 B ms | entropy /s | "
        "getrandom(32) ns | entropy_avail | daemon CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['config']} | {r['register_ms']} | {r['registrations_per_s']} | {r['put_ms']} | {r['get_ms']} | "
            f"{r['entropy_1000B_ms']} | {r['entropy_per_s']} | {r['getrandom_32B_ns']} | "
            f"{r['entropy_avail_before']} → {r['entropy_avail_after']} | {r['daemon_cpu_s']} |"
        )
    lines += [f"NOTE: {m}" for m in report["notes"]]
    lines += [f"MISSING: {m}" for m in report["missing"]]
    return "\n".join(lines)
