"""`strongroom bench`: every suite in one run, results.json after each suite, then report.md and
the charts.  A suite that fails is recorded with its error and the others still run."""

from __future__ import annotations

import datetime
import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom.bench import keyserver, pairs

Progress = Callable[[str], None]


def _keyserver(quick: bool, progress: Progress) -> dict[str, Any]:
    return keyserver.run(quick, progress=progress)


def _entropy(quick: bool, progress: Progress) -> dict[str, Any]:
    from strongroom.bench import entropy_configs

    return entropy_configs.run(quick, progress)


def _rng(quick: bool, progress: Progress) -> dict[str, Any]:
    from strongroom.bench import rng

    return rng.run(quick, progress=progress)


def _fs(quick: bool, progress: Progress) -> dict[str, Any]:
    from strongroom.bench import fs

    return fs.run(quick, progress=progress)


def _acl(quick: bool, progress: Progress) -> dict[str, Any]:
    from strongroom.bench import acl

    return acl.run(quick, progress)


def _bulk(quick: bool, progress: Progress) -> dict[str, Any]:
    from strongroom.bench import bulk

    return bulk.run(quick, progress)


# In run order: the CPU-bound suites first, the ones that start daemons or drop caches later.
SUITES: dict[str, Callable[[bool, Progress], dict[str, Any]]] = {
    "rng": _rng,
    "keyserver": _keyserver,
    "entropy": _entropy,
    "bulk": _bulk,
    "fs": _fs,
    "acl": _acl,
}


def run(
    out: Path,
    quick: bool = False,
    only: list[str] | None = None,
    on_suite: Callable[[str, int, int], None] = lambda _name, _i, _n: None,
    progress: Progress = print,
    command: str = "strongroom bench",
    doc: Path | None = None,
) -> dict[str, Any]:
    """Runs the chosen suites; writes out/results.json (after each suite), out/report.md, the
    charts and, with ``doc``, the project's report (docs/BENCHMARKS.md).  Returns the results."""
    chosen = [name for name in SUITES if not only or name in only]
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    results: dict[str, Any] = {
        "command": command,
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": keyserver.machine_facts(),
        "commit": pairs.commit_of(None),
        "suites": {},
        "durations_s": {},
        "duration_s": 0.0,
    }
    for i, name in enumerate(chosen):
        on_suite(name, i, len(chosen))
        t = time.perf_counter()
        try:
            results["suites"][name] = SUITES[name](quick, progress)
        except Exception as e:  # noqa: BLE001 - one suite's failure is recorded, the others still run
            detail = traceback.format_exception_only(type(e), e)[-1].strip()
            results["suites"][name] = {"error": detail[:500]}
            progress(f"{name} FAILED: {detail[:200]}")
        results["durations_s"][name] = round(time.perf_counter() - t, 1)
        results["duration_s"] = round(time.time() - started, 1)
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    from strongroom.bench import report

    results["charts"] = report.write(results, out, doc)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results
