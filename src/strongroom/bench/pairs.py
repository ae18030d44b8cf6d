"""Side-by-side runs of two builds (bench/*_pair.py): each writes its paired ratios to a JSON file
(``--json``), and docs/BENCHMARKS.md shows the latest of each kind (report.py), with the command,
the date, the machine and the two commits."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strongroom.bench.keyserver import machine_facts

# the kinds, in the order the report shows them
TITLES = {
    "keyserver": "Key server (bench/keyserver_pair.py): request rate after / before, and server CPU per request",
    "fs_small": "Filesystem, small files (bench/fs_small_pair.py): time and daemon CPU, after / before",
    "fs_big": "Filesystem, big files (bench/fs_big_pair.py): time and daemon CPU, after / before",
    "vault": "Vault-compatible API vs OpenBao (bench/vault_pair.py): Strongroom's rate / OpenBao's, p99",
    "kmip": "KMIP vs PyKMIP's server (bench/kmip_pair.py): Strongroom's rate / PyKMIP's, and KMIP Get / Strongroom's HTTPS get",
    "fs_db": "Databases on the mount (bench/fs_db_pair.py): pgbench, fio and a commit's write, Strongroom's figure / the other's",
}


def commit_of(src: str | None) -> str:
    """The git commit of a checkout's sources (this checkout when None); "?" outside git."""
    where = Path(src).resolve().parent if src else Path(__file__).resolve().parents[3]
    r = subprocess.run(["git", "-C", str(where), "log", "-1", "--format=%h %s"], capture_output=True, text=True, check=False)
    return r.stdout.strip()[:100] if r.returncode == 0 and r.stdout.strip() else "?"


def save(
    path: Path, kind: str, rounds: int, bases: list[str], rows: list[dict[str, Any]], others: dict[str, str] | None = None
) -> None:
    """Write one run: ``rows`` are {"base": src, "phase": name, <metric>: paired median ratio, ...};
    ``bases`` are other builds' sources (named by their commits), ``others`` other systems (a
    row's "base" -> what it is)."""
    data = {
        "kind": kind,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine_facts(),
        "this": commit_of(None),
        "bases": {**{b: commit_of(b) for b in bases}, **(others or {})},
        "rounds": rounds,
        "rows": rows,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def fs_report(
    kind: str,
    rounds: int,
    bases: list[tuple[str, str]],
    this: str,
    phases: Sequence[str],
    wall: dict[str, dict[str, list[float]]],
    cpu: dict[str, dict[str, list[float]]],
    json_path: Path | None,
) -> None:
    """Print each phase's paired ratios of ``this`` against each base ((src, system name)), wall
    time and daemon CPU, and store them at ``json_path`` (if given) for the report."""
    from strongroom.bench.fs import paired_ratio

    rows = []
    for src, base in bases:
        ratios = {p: (paired_ratio(wall[this][p], wall[base][p]), paired_ratio(cpu[this][p], cpu[base][p])) for p in phases}
        cells = ", ".join(f"{p} {w:.2f} / {c:.2f}" for p, (w, c) in ratios.items())
        print(f"this vs {base} (paired median ratio, wall / daemon CPU): {cells}")
        rows += [{"base": src, "phase": p, "time": w, "daemon CPU": c} for p, (w, c) in ratios.items()]
    if json_path is not None:
        save(json_path, kind, rounds, [src for src, _ in bases], rows)


def table(data: dict[str, Any]) -> str:
    """One run as a markdown table: a row per (base, phase), a column per metric."""
    metrics: list[str] = []
    for row in data["rows"]:
        metrics += [k for k in row if k not in ("base", "phase") and k not in metrics]
    lines = ["| before | phase | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for row in data["rows"]:
        cells = [f"{row[m]:.2f}" if isinstance(row.get(m), float) else str(row.get(m, "")) for m in metrics]
        before = data["bases"].get(row["base"], row["base"])
        lines.append(f"| {before[:60]} | {row['phase']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
