"""`strongroom rng bench`: the OpenSSL thread's key-generation measurement, per source, in one run.

- 32-byte keys: 1,000,000 from each fast source (os.urandom, Strongroom's new_key(), RDRAND,
  RDSEED, RDRAND through its health tests) as five rounds, median ns per key; a fixed time budget
  for slow sources (hwrng, remote); and a C loop of getrandom(2) as the floor.
- Bulk: MB/s for 1 MiB reads from each source (slow ones within their budget).
- Testing: MB/s of the SP 800-90B tests, the FIPS 140-2 blocks and ent's statistics, so testing
  is shown never to throttle a source.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom.crypto import aead
from strongroom.rng.fips import FipsStream
from strongroom.rng.health import HealthTests
from strongroom.rng.monitor import TestedSource
from strongroom.rng.sources import Source, SourceUnavailable, open_source
from strongroom.rng.stats import EntAccumulator

MIB = 1 << 20
ROUNDS = 5
C_LOOP = Path(__file__).with_name("getrandom_loop.c")

Progress = Callable[[str], None]


def _per_key_ns(fn: Callable[[int], object], keys: int) -> float:
    """Median over ROUNDS rounds of ns per fn(32) call."""
    per_round = max(1, keys // ROUNDS)
    samples = []
    for _ in range(ROUNDS):
        t = time.perf_counter_ns()
        for _ in range(per_round):
            fn(32)
        samples.append((time.perf_counter_ns() - t) / per_round)
    return statistics.median(samples)


def _paired_ns(a: Callable[[int], object], b: Callable[[int], object], keys: int) -> tuple[float, float]:
    """Like _per_key_ns for two functions, their rounds interleaved (a, b, a, b, ...) so that the
    machine's drift during the run falls on both alike; medians of 2 x ROUNDS rounds each."""
    per_round = max(1, keys // (2 * ROUNDS))
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(2 * ROUNDS):
        for fn, out in ((a, samples[0]), (b, samples[1])):
            t = time.perf_counter_ns()
            for _ in range(per_round):
                fn(32)
            out.append((time.perf_counter_ns() - t) / per_round)
    return statistics.median(samples[0]), statistics.median(samples[1])


def _budget_ns(fn: Callable[[int], object], seconds: float) -> tuple[float, int]:
    """ns per fn(32) call, as many calls as fit in the budget."""
    n, t0 = 0, time.perf_counter_ns()
    deadline = t0 + seconds * 1e9
    while time.perf_counter_ns() < deadline:
        fn(32)
        n += 1
    return (time.perf_counter_ns() - t0) / max(n, 1), n


def _bulk_mbps(fn: Callable[[int], object], mib: int, piece: int = MIB, budget: float | None = None) -> float:
    """MB/s reading ``mib`` MiB in ``piece``-byte reads (stopping at the budget, if any); median of rounds."""
    rounds = []
    for _ in range(3 if budget is None else 1):
        t0 = time.perf_counter()
        done = 0
        while done < mib * MIB and (budget is None or time.perf_counter() - t0 < budget):
            fn(piece)
            done += piece
        rounds.append(done / (time.perf_counter() - t0) / 1e6)
    return statistics.median(rounds)


def c_getrandom(keys: int, mib: int) -> dict[str, float] | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "getrandom_loop"
        subprocess.run([cc, "-O2", "-o", str(exe), str(C_LOOP)], check=True)
        runs = [
            subprocess.run([str(exe), str(keys // ROUNDS), str(max(1, mib))], capture_output=True, text=True, check=True)
            for _ in range(ROUNDS)
        ]
    ns = statistics.median(float(r.stdout.split()[0]) for r in runs)
    mbps = statistics.median(float(r.stdout.split()[1]) for r in runs)
    return {"ns_per_key": round(ns, 1), "bulk_MBps": round(mbps, 1)}


def run(quick: bool = False, profile: Path | None = None, remote: bool = True, progress: Progress = print) -> dict[str, Any]:
    keys = 100_000 if quick else 1_000_000
    budget = 0.5 if quick else 10.0
    bulk_mib = 8 if quick else 64
    test_mib = 16 if quick else 64
    report: dict[str, Any] = {
        "quick": quick,
        "keys": keys,
        "slow_budget_s": budget,
        "keygen": [],
        "bulk": [],
        "testing": [],
        "missing": [],
    }

    progress("C getrandom(2) loop (the floor)")
    floor = c_getrandom(keys, bulk_mib)
    if floor is None:
        report["missing"].append("a C compiler for the getrandom(2) floor (apt-get install gcc)")
    else:
        report["keygen"].append({"source": "C getrandom(2)", "ns_per_key": floor["ns_per_key"], "keys": keys})
        report["bulk"].append({"source": "C getrandom(2)", "MBps": floor["bulk_MBps"]})

    progress("os.urandom(32) and Strongroom's new_key()")
    urandom_ns, new_key_ns = _paired_ns(os.urandom, lambda _n: aead.new_key(), keys)
    report["keygen"].append({"source": "os.urandom(32)", "ns_per_key": round(urandom_ns, 1), "keys": keys})
    report["keygen"].append({"source": "strongroom new_key()", "ns_per_key": round(new_key_ns, 1), "keys": keys})
    report["bulk"].append({"source": "getrandom (os.urandom)", "MBps": round(_bulk_mbps(os.urandom, bulk_mib), 1)})

    server = None
    with tempfile.TemporaryDirectory(prefix="strongroom-rng-bench-") as tmp:
        for name in ("rdrand", "rdseed", "hwrng", "remote"):
            try:
                if name == "remote" and remote and profile is None:
                    from strongroom.bench.keyserver import Strongroom

                    progress("starting a local server for the remote source")
                    server = Strongroom(Path(tmp), workers=1)
                    profile = Path(tmp) / "profile"
                if name == "remote" and not remote:
                    raise SourceUnavailable("remote: not measured (--no-remote)")
                src: Source = open_source(name, profile)
            except SourceUnavailable as e:
                report["missing"].append(str(e))
                progress(f"{name}: {e}")
                continue
            slow = name in ("hwrng", "remote")
            progress(f"{name}: {'a ' + str(budget) + ' s budget' if slow else str(keys) + ' keys'}")
            if slow:
                ns, n = _budget_ns(src.read, budget)
                report["keygen"].append({"source": name, "ns_per_key": round(ns, 1), "keys": n})
                piece = 4096 if name == "hwrng" else 65536
                report["bulk"].append({"source": name, "MBps": round(_bulk_mbps(src.read, 1, piece, budget), 3), "piece": piece})
            else:
                rd_keys = keys
                report["keygen"].append({"source": name, "ns_per_key": round(_per_key_ns(src.read, rd_keys), 1), "keys": rd_keys})
                mib = bulk_mib if name == "rdrand" else max(1, bulk_mib // 16)
                report["bulk"].append({"source": name, "MBps": round(_bulk_mbps(src.read, mib), 1)})
                tested = TestedSource(src)
                report["keygen"].append(
                    {
                        "source": f"{name} (health-tested)",
                        "ns_per_key": round(_per_key_ns(tested.read, rd_keys), 1),
                        "keys": rd_keys,
                    }
                )
                report["bulk"].append({"source": f"{name} (health-tested)", "MBps": round(_bulk_mbps(tested.read, mib), 1)})
            src.close()
        if server is not None:
            server.stop()

    progress(f"testing throughput on {test_mib} MiB")
    data = os.urandom(test_mib * MIB)
    for label, make in (
        ("SP 800-90B RCT + APT", lambda: HealthTests(4.0).feed),
        ("FIPS 140-2 blocks", lambda: functools.partial(FipsStream().feed, keep=False)),
        ("ent statistics", lambda: EntAccumulator().update),
    ):
        rounds = []
        for _ in range(3):
            fn = make()
            t = time.perf_counter()
            for start in range(0, len(data), MIB):
                fn(data[start : start + MIB])
            rounds.append(len(data) / (time.perf_counter() - t) / 1e6)
        report["testing"].append({"test": label, "MBps": round(statistics.median(rounds), 1)})
    ent_fips = 1 / sum(1 / r["MBps"] for r in report["testing"][1:])
    report["testing"].append({"test": "rng test (ent + FIPS, one core)", "MBps": round(ent_fips, 1)})
    # The C tools that `rng test` stands in for, on the same bytes (peers: ent, rng-tools5's rngtest).
    with tempfile.NamedTemporaryFile(prefix="strongroom-rng-bench-") as sample:
        sample.write(data)
        sample.flush()
        for label, argv in (("peer: ent (C)", ["ent"]), ("peer: rngtest (rng-tools5, FIPS 140-2)", ["rngtest"])):
            if shutil.which(argv[0]) is None:
                report["missing"].append(f"{argv[0]} (apt-get install {'ent' if argv[0] == 'ent' else 'rng-tools5'})")
                continue
            rounds = []
            for _ in range(3):
                with open(sample.name, "rb") as stdin:
                    t = time.perf_counter()
                    # rngtest exits 1 when a block fails FIPS (about 1 in 1,000 random blocks do)
                    subprocess.run(argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
                    rounds.append(len(data) / (time.perf_counter() - t) / 1e6)
            report["testing"].append({"test": label, "MBps": round(statistics.median(rounds), 1)})

    rdrand_bulk = next((r["MBps"] for r in report["bulk"] if r["source"] == "rdrand"), None)
    ours = [r for r in report["testing"] if not r["test"].startswith("peer:")]
    report["targets"] = {
        "new_key_over_urandom": round(new_key_ns / urandom_ns, 3),
        "new_key_met": new_key_ns <= 1.25 * urandom_ns,
        "rdrand_bulk_MBps": rdrand_bulk,
        "rdrand_met": rdrand_bulk is not None and rdrand_bulk >= 200,
        "testing_min_MBps": min(r["MBps"] for r in ours),
        "testing_met": min(r["MBps"] for r in ours) >= 100,
    }
    return report


def table(report: dict[str, Any]) -> str:
    lines = ["| 32-byte key from | ns per key (median) | keys |", "|---|---|---|"]
    lines += [f"| {r['source']} | {r['ns_per_key']:,} | {r['keys']:,} |" for r in report["keygen"]]
    lines += ["", "| bulk, 1 MiB reads | MB/s |", "|---|---|"]
    lines += [f"| {r['source']} | {r['MBps']:,} |" for r in report["bulk"]]
    lines += ["", "| test | MB/s |", "|---|---|"]
    lines += [f"| {r['test']} | {r['MBps']:,} |" for r in report["testing"]]
    t = report["targets"]
    lines += [
        "",
        f"new_key() / os.urandom(32): {t['new_key_over_urandom']} (target <= 1.25: {'met' if t['new_key_met'] else 'MISSED'})",
        f"RDRAND bulk: {t['rdrand_bulk_MBps']} MB/s (target >= 200: {'met' if t['rdrand_met'] else 'MISSED'})",
        f"slowest test: {t['testing_min_MBps']} MB/s (target >= 100: {'met' if t['testing_met'] else 'MISSED'})",
    ]
    lines += [f"MISSING: {m}" for m in report["missing"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-remote", action="store_true", help="Do not start a server for the remote source.")
    ap.add_argument("--out", type=Path, default=Path("bench-results/rng.json"))
    args = ap.parse_args(argv)
    report = run(args.quick, remote=not args.no_remote)
    print(table(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"results in {args.out}")
    return 0
