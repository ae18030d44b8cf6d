"""The load generator: wrk (C) replaying requests signed beforehand, so signing costs no load-time CPU
and every server is driven by the same generator."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from strongroom.bench.procs import CpuWindow
from strongroom.client import Client

LUA = Path(__file__).with_name("wrk_presigned.lua")


def round_order(items: list[Any], r: int) -> list[Any]:
    """The order of round ``r``: the first two swapped every other round and the whole reversed
    every other pair of rounds, so over four rounds neither of the first two (a build and the
    build before it) keeps one place or one neighbour -- reversing alone leaves the middle one of
    three always in the middle, always right after or before the third."""
    seq = list(items)
    if r % 2 == 1 and len(seq) > 1:
        seq[0], seq[1] = seq[1], seq[0]
    if r // 2 % 2 == 1:
        seq.reverse()
    return seq


@dataclass
class LoadResult:
    label: str
    connections: int
    seconds: float
    requests: int
    rate: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    errors: int
    server_cpu: float  # cores used by the server tree, averaged over the run
    generator_cpu: float  # cores used by wrk
    generator_ceiling: float  # requests/s wrk could send at 100 % of one core per thread, from its CPU per request

    def row(self) -> dict[str, object]:
        return asdict(self)


def request_line(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> str:
    h = "|".join(f"{k}: {v}" for k, v in headers.items())
    text = body.decode()
    if "\t" in text or "\n" in text or "\t" in path:
        raise ValueError("pre-signed requests must not contain tabs or newlines")
    return f"{method}\t{path}\t{h}\t{text}"


def presign(client: Client, method: str, path: str, body: bytes, count: int) -> list[str]:
    """Sign ``count`` copies of one request, each with its own nonce."""
    lines = []
    headers_base = {"content-type": "application/json"} if body else {}
    for _ in range(count):
        headers = {**headers_base, **client.signed_headers(method, path, body)}
        lines.append(request_line(method, path, headers, body))
    return lines


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def parse_wrk(out: str) -> dict[str, float]:
    res: dict[str, float] = {}
    for pct in ("50", "90", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)
        res[f"p{pct}"] = _ms(m.group(1), m.group(2)) if m else float("nan")
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", out)
    res["requests"] = float(m.group(1)) if m else 0.0
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    res["rate"] = float(m.group(1)) if m else 0.0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    res["errors"] = float(errors)
    return res


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def run_wrk(
    label: str,
    base_url: str,
    lines: Iterable[str] | None,
    connections: int,
    seconds: float,
    server_pids: list[int],
    headers: dict[str, str] | None = None,
    method: str = "GET",
    path: str = "/",
    body: str = "",
) -> LoadResult:
    """Drive ``base_url`` with wrk: pre-signed ``lines`` (replayed), or one fixed request."""
    threads = min(2, connections)
    with tempfile.TemporaryDirectory() as tmp:
        duration = f"{max(1, round(seconds))}s"
        base = ["wrk", "-t", str(threads), "-c", str(connections), "-d", duration, "--latency", "--timeout", "10s"]
        if lines is None:
            # A fixed request: wrk's own fast path (no Lua per request), headers with -H,
            # as the baselines measured peers.
            script = Path(tmp) / "fixed.lua"
            script.write_text(f"wrk.method = {json.dumps(method)}\nwrk.body = {json.dumps(body)}\n")
            cmd = [*base, "-s", str(script)]
            for k, v in (headers or {}).items():
                cmd += ["-H", f"{k}: {v}"]
            cmd.append(base_url + path)
        else:
            req_file = Path(tmp) / "requests.tsv"
            req_file.write_text("\n".join(lines) + "\n")
            cmd = [*base, "-s", str(LUA), base_url, "--", str(req_file), str(threads)]
        for _attempt in range(2):  # wrk 4.1 occasionally dies at start-up with no message; one retry
            with CpuWindow(server_pids) as w:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60, env={**os.environ})
            if proc.returncode == 0:
                break
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-300:]}")
    r = parse_wrk(proc.stdout)
    gen_cpu = w.children_cpu / w.wall
    per_req = w.children_cpu / r["requests"] if r["requests"] else float("inf")
    return LoadResult(
        label=label,
        connections=connections,
        seconds=round(w.wall, 2),
        requests=int(r["requests"]),
        rate=round(r["rate"], 1),
        p50_ms=round(r["p50"], 2),
        p90_ms=round(r["p90"], 2),
        p99_ms=round(r["p99"], 2),
        errors=int(r["errors"]),
        server_cpu=round(w.server_cpu / w.wall, 2),
        generator_cpu=round(gen_cpu, 2),
        generator_ceiling=round(threads / per_req, 0) if per_req else 0.0,
    )


def sleep_until_quiet(seconds: float = 1.0) -> None:
    time.sleep(seconds)
