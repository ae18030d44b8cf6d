"""Bulk file encryption (issue 6): `strongroom fs encrypt` of one big file against age (X25519
recipient, and passphrase/scrypt), `gpg --symmetric` and `openssl enc -aes-256-ctr`, in one run,
each with AES-NI on (and, for the OpenSSL-based ones, off).

Every tool reads the same page-cached file and writes to /dev/null, so the figures are the
tools' own cost (read, encrypt, write), not the disk's.  Each command also runs on an empty
file: ``wall`` throughput is size / time (what a user waits for, key derivation included);
``stream`` throughput is size / (time - empty-file time), the rate once the key is ready.

    strongroom bench --only bulk [--quick] [--out DIR]
"""

from __future__ import annotations

import os
import pty
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strongroom.bench.fs import AESNI_OFF_SYSTEM, AESNI_OFF_WHEEL

PASSPHRASE = "benchmark passphrase"  # noqa: S105 - throwaway files
MIB = 1 << 20


@dataclass
class Tool:
    name: str
    argv: Callable[[Path], list[str]]  # the command for an input file
    env: dict[str, str] = field(default_factory=dict)
    cores: str = "all"
    aesni: bool = True
    tty_passphrase: bool = False  # age -p reads the passphrase from a terminal only
    needs: str = ""  # the binary that must exist


def _run(tool: Tool, src: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run."""
    argv = tool.argv(src)
    env = {**os.environ, **tool.env}
    t = time.perf_counter()
    if tool.tty_passphrase:
        rc, cpu = _run_with_tty(argv, env)
    else:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = rc = os.waitstatus_to_exitcode(status)
        cpu = usage.ru_utime + usage.ru_stime
        if rc != 0:
            raise RuntimeError(f"{tool.name}: exit {rc}: {err.decode(errors='replace').strip()[:300]}")
    wall = time.perf_counter() - t
    if rc != 0:
        raise RuntimeError(f"{tool.name}: exit {rc}")
    return wall, cpu


def _run_with_tty(argv: list[str], env: dict[str, str]) -> tuple[int, float]:
    """Run argv on a pseudo-terminal, answering every passphrase prompt."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.execvpe(argv[0], argv, env)  # noqa: S606 - a fixed benchmark command
        finally:
            os._exit(127)  # exec failed: never return into the parent's code in the child
    seen, answered = b"", 0
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], 120)
            if not ready:
                raise RuntimeError(f"{argv[0]}: no output for 120 s")
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
            while seen.lower().count(b"passphrase") > answered:  # "Enter passphrase (...):", "Confirm passphrase:"
                os.write(fd, PASSPHRASE.encode() + b"\n")
                answered += 1
    finally:
        os.close(fd)
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime


def tools(root: Path, strongroom: list[str]) -> list[Tool]:
    pw = root / "pw"
    pw.write_text(PASSPHRASE)
    gnupg = root / "gnupg"
    gnupg.mkdir(mode=0o700, exist_ok=True)
    sr = [*strongroom, "fs", "encrypt"]
    out: list[Tool] = [
        Tool(
            "strongroom (1 core)",
            lambda f: ["taskset", "-c", "0", *sr, str(f), "-o", "/dev/null", "--passphrase-file", str(pw), "--threads", "1"],
            cores="1",
        ),
        Tool("strongroom", lambda f: [*sr, str(f), "-o", "/dev/null", "--passphrase-file", str(pw)]),
        Tool(
            "strongroom",
            lambda f: [*sr, str(f), "-o", "/dev/null", "--passphrase-file", str(pw)],
            env={"OPENSSL_ia32cap": AESNI_OFF_WHEEL},
            aesni=False,
        ),
    ]
    recipient = ""
    if shutil.which("age-keygen"):
        keyfile = root / "age.key"
        subprocess.run(["age-keygen", "-o", str(keyfile)], check=True, capture_output=True)
        recipient = next(line.split()[-1] for line in keyfile.read_text().splitlines() if "public key" in line)
    out += [
        Tool("age (X25519 recipient)", lambda f: ["age", "-r", recipient, "-o", "/dev/null", str(f)], needs="age"),
        Tool("age -p (scrypt passphrase)", lambda f: ["age", "-p", "-o", "/dev/null", str(f)], tty_passphrase=True, needs="age"),
        Tool(
            "gpg --symmetric (AES256)",
            lambda f: [
                "gpg", "--homedir", str(gnupg), "--batch", "--yes", "--quiet", "--pinentry-mode", "loopback",
                "--passphrase-file", str(pw), "--symmetric", "--cipher-algo", "AES256", "--compress-algo", "none",
                "-o", "/dev/null", str(f),
            ],
            needs="gpg",
        ),
    ]  # fmt: skip
    ossl = ["openssl", "enc", "-aes-256-ctr", "-pbkdf2", "-pass", f"file:{pw}", "-out", "/dev/null", "-in"]
    out += [
        Tool("openssl enc -aes-256-ctr", lambda f: [*ossl, str(f)], needs="openssl"),
        Tool(
            "openssl enc -aes-256-ctr",
            lambda f: [*ossl, str(f)],
            env={"OPENSSL_ia32cap": AESNI_OFF_SYSTEM},
            aesni=False,
            needs="openssl",
        ),
    ]
    return out


def run(quick: bool = False, progress: Callable[[str], None] = print, base: Path = Path("/var/tmp")) -> dict[str, Any]:
    mib = 256 if quick else 1024
    repeats = 1 if quick else 5
    report: dict[str, Any] = {"quick": quick, "mib": mib, "repeats": repeats, "output": "/dev/null", "rows": [], "missing": []}
    strongroom = [sys.executable, "-m", "strongroom.cli.main"]
    with tempfile.TemporaryDirectory(prefix="strongroom-bulkbench-", dir=base) as tmp:
        root = Path(tmp)
        big, empty = root / "big.bin", root / "empty.bin"
        with open(big, "wb") as f:
            for _ in range(mib):
                f.write(os.urandom(MIB))
        empty.write_bytes(b"")
        ready: list[tuple[Tool, float]] = []
        for tool in tools(root, strongroom):
            label = f"{tool.name}, AES-NI {'on' if tool.aesni else 'off'}"
            if tool.needs and shutil.which(tool.needs) is None:
                report["missing"].append(f"{tool.needs} (apt-get install {tool.needs}): {tool.name} not measured")
                progress(f"{label}: MISSING")
                continue
            progress(f"{label}: warm-up")
            try:
                _run(tool, big)  # warm-up: page cache, binaries, Python's bytecode cache
                ready.append((tool, statistics.median(_run(tool, empty)[0] for _ in range(3))))
            except RuntimeError as e:
                report["missing"].append(f"{tool.name}: {e}")
        # Round after round, every tool once per round: the machine's drift (±30 % here between
        # minutes) falls on every row alike, and rows compare within the same minutes.
        runs: list[list[tuple[float, float]] | None] = [[] for _ in ready]
        for r in range(repeats):
            progress(f"round {r + 1}/{repeats}")
            for i, (tool, _fixed) in enumerate(ready):
                measured = runs[i]
                if measured is None:
                    continue
                try:
                    measured.append(_run(tool, big))
                except RuntimeError as e:
                    report["missing"].append(f"{tool.name}: {e}")
                    runs[i] = None
        for (tool, fixed), measured in zip(ready, runs, strict=True):
            if measured is None:
                continue
            wall = statistics.median(r[0] for r in measured)
            cpu = statistics.median(r[1] for r in measured)
            # Start-up and key derivation vary by tens of ms: when they are most of the run, the
            # difference says nothing and no stream figure is given.
            stream = round(mib / (wall - fixed), 1) if wall - fixed >= 0.2 * wall else None
            report["rows"].append(
                {
                    "tool": tool.name,
                    "aesni": tool.aesni,
                    "cores": tool.cores,
                    "wall_s": round(wall, 3),
                    "empty_file_s": round(fixed, 3),
                    "cpu_s": round(cpu, 3),
                    "wall_MiBps": round(mib / wall, 1),
                    "stream_MiBps": stream,
                }
            )
    report["targets"] = targets(report["rows"])
    return report


def targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def find(name: str, aesni: bool = True) -> dict[str, Any] | None:
        return next((r for r in rows if r["tool"] == name and r["aesni"] == aesni), None)

    sr, one = find("strongroom"), find("strongroom (1 core)")
    ages = [r for r in rows if r["tool"].startswith("age") and r["stream_MiBps"]]
    out: dict[str, Any] = {}
    if sr and not sr["stream_MiBps"]:
        return {"note": "the input was too small to separate streaming from start-up (use the full run)"}
    if sr and ages:
        best = max(ages, key=lambda r: r["stream_MiBps"])
        out["vs_best_age_stream"] = round(sr["stream_MiBps"] / best["stream_MiBps"], 2)
        out["best_age"] = best["tool"]
        out["vs_age_passphrase_wall"] = next(
            (round(sr["wall_MiBps"] / r["wall_MiBps"], 2) for r in ages if "scrypt" in r["tool"]), None
        )
        out["ge_age_met"] = sr["stream_MiBps"] >= best["stream_MiBps"]
    if sr and one and one["stream_MiBps"]:
        out["all_cores_vs_one_core_stream"] = round(sr["stream_MiBps"] / one["stream_MiBps"], 2)
        out["scaling_met"] = sr["stream_MiBps"] >= 1.6 * one["stream_MiBps"]
    return out


def table(report: dict[str, Any]) -> str:
    lines = [
        f"{report['mib']} MiB, page-cached input, output /dev/null, median of {report['repeats']}",
        "",
        "| tool | AES-NI | cores | wall s | empty-file s | CPU s | wall MiB/s | stream MiB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['tool']} | {'on' if r['aesni'] else 'off'} | {r['cores']} | {r['wall_s']} | {r['empty_file_s']} | "
            f"{r['cpu_s']} | {r['wall_MiBps']:,} | {'—' if r['stream_MiBps'] is None else format(r['stream_MiBps'], ',')} |"
        )
    t = report.get("targets", {})
    if "note" in t:
        lines.append(f"\n{t['note']}")
    if "ge_age_met" in t:
        verdict = "met" if t["ge_age_met"] else "MISSED"
        lines.append(f"\nstream throughput vs {t['best_age']}: {t['vs_best_age_stream']}x (target >= 1: {verdict})")
    if "scaling_met" in t:
        verdict = "met" if t["scaling_met"] else "MISSED"
        lines.append(f"all cores vs one core: {t['all_cores_vs_one_core_stream']}x (target >= 1.6: {verdict})")
    lines += [f"MISSING: {m}" for m in report["missing"]]
    return "\n".join(lines)
