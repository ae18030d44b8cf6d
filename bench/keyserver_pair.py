"""Key-server A/B of two builds: both servers up at once, wrk alternating between them.

Each build's server runs from its own sources (``--base`` another checkout's src, e.g. a git
worktree with its helpers built; the other is this checkout).  Rows: get and put of 32 bytes at
1 and 16 connections, ROUNDS rounds of SECONDS each, the order flipped every round; the median
of the paired rate ratios (after / base) and each server's CPU per request.

    git worktree add -f /tmp/base BASE_COMMIT   # then build its helpers (see BENCHMARKS.md, Method)
    .venv/bin/python bench/keyserver_pair.py --base /tmp/base/src --rounds 8 --seconds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

OPS = ("get 32 B", "put 32 B")
PER_SECOND = {1: 3000, 16: 9000}  # pre-signed requests per second of load: above any rate seen

# Run in a child with the build's sources first on PYTHONPATH: start a server, pre-sign, print a
# handle, serve until stdin closes.
_CHILD = """
import json, sys, tempfile
from pathlib import Path
from strongroom.bench import keyserver as k, load
with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
    s = k.Strongroom(Path(tmp) / "s", workers=1)
    try:
        s.client.put("bench32", k.VALUE32)
        files = {}
        for label in ("get 32 B", "put 32 B"):
            method, path, body = k._StrongroomLoad.requests[label]
            f = Path(tmp) / (label.split()[0] + ".lines")
            f.write_text("\\n".join(load.presign(s.client, method, path, body, int(sys.argv[1]))) + "\\n")
            files[label] = str(f)
        print(json.dumps({"url": s.url, "pids": s.pids(), "files": files}), flush=True)
        sys.stdin.read()
    finally:
        s.stop()
"""


def main() -> None:
    from strongroom.bench import load

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--base", required=True, help="the other build's src directory")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument(
        "--json", type=Path, help="also write the paired ratios here (docs/bench/pairs/keyserver.json for the report)"
    )
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parent.parent / "src")
    need = {c: int(args.seconds * n) for c, n in PER_SECOND.items()}
    total = args.rounds * sum(need.values()) + 100
    procs, handles = [], []
    try:
        for src in (args.base, here):
            env = {**os.environ, "PYTHONPATH": src}
            cmd = [sys.executable, "-c", _CHILD, str(total)]
            p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
            procs.append(p)
            assert p.stdout is not None
            handles.append(json.loads(p.stdout.readline()))
        lines = [{op: Path(h["files"][op]).read_text().splitlines() for op in OPS} for h in handles]
        used: dict[tuple[int, str], int] = {}
        res: dict[tuple[str, int], list[list[tuple[float, float]]]] = {}
        for r in range(args.rounds):
            for c in PER_SECOND:
                for op in OPS:
                    for i in (0, 1) if r % 2 == 0 else (1, 0):
                        start = used.get((i, op), 0)
                        used[(i, op)] = start + need[c]
                        chunk = lines[i][op][start : start + need[c]]
                        lr = load.run_wrk(op, handles[i]["url"], chunk, c, args.seconds, handles[i]["pids"])
                        per = res.setdefault((op, c), [[], []])
                        per[i].append((lr.rate, lr.server_cpu / lr.rate * 1e6 if lr.rate else 0.0))
    finally:
        for p in procs:
            if p.stdin is not None:
                p.stdin.close()
            p.wait(60)
    print("| operation | clients | base req/s | after req/s | paired ratio (range) | CPU per request after / base |")
    print("|---|---|---|---|---|---|")
    rows = []
    for (op, c), (base, after) in res.items():
        ratios = [a[0] / b[0] for a, b in zip(after, base, strict=True) if b[0]]
        cpu = statistics.median(x[1] for x in after) / statistics.median(x[1] for x in base)
        print(
            f"| {op} | {c} | {statistics.median(x[0] for x in base):,.0f} | {statistics.median(x[0] for x in after):,.0f} "
            f"| {statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) | {cpu:.2f} |"
        )
        rows.append(
            {
                "base": args.base,
                "phase": f"{op}, {c} client{'s' if c > 1 else ''}",
                "rate": statistics.median(ratios),
                "lowest round": min(ratios),
                "highest round": max(ratios),
                "CPU per request": cpu,
            }
        )
    if args.json:
        from strongroom.bench import pairs

        pairs.save(args.json, "keyserver", args.rounds, [args.base], rows)


if __name__ == "__main__":
    main()
