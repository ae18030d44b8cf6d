"""Big-file A/B of builds of the daemon: 1 GiB written with dd (fsync'd) and a 1 GiB file of
random bytes copied in with cp, each build on a fresh mount per measurement with the page cache
dropped before it, the builds alternating in every round.  Prints each build's median wall time
and daemon CPU (user + system, from /proc), and the paired per-round ratios of this checkout to
each ``--base`` build.  (bench/fs.py runs the same phases among other systems, where a build's
numbers move with what ran before it; this isolates two builds.)

    .venv/bin/python bench/fs_big_pair.py --base /tmp/base/src 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from strongroom.bench import pairs
from strongroom.bench.fs import Strongroom, daemon_cpu_s, drop_caches

MIB = 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rounds", type=int, nargs="?", default=6)
    ap.add_argument("--base", action="append", required=True, help="another build's src directory (put first on PYTHONPATH)")
    ap.add_argument("--json", type=Path, help="also write the paired ratios here (docs/bench/pairs/fs_big.json for the report)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(dir="/var/tmp"))
    source = root / "source.iso"
    with open(source, "wb") as f:
        for _ in range(MIB):
            f.write(os.urandom(1 << 20))
    systems = [Strongroom(root / f"base{i}", f"base {src}", src) for i, src in enumerate(args.base)]
    systems.append(Strongroom(root / "this", "this", None))
    phases: dict[str, Callable[[Path], list[str]]] = {
        "write": lambda m: ["dd", "if=/dev/zero", f"of={m}/big", "bs=1M", f"count={MIB}", "conv=fsync", "status=none"],
        "copy": lambda m: ["cp", str(source), f"{m}/big"],
    }
    wall: dict[str, dict[str, list[float]]] = {s.name: {p: [] for p in phases} for s in systems}
    cpu: dict[str, dict[str, list[float]]] = {s.name: {p: [] for p in phases} for s in systems}
    try:
        for r in range(args.rounds):
            for phase, cmd in phases.items():
                for s in systems[r % len(systems) :] + systems[: r % len(systems)]:
                    drop_caches()
                    s.setup(True)
                    try:
                        pid = s.pid()
                        before, start = daemon_cpu_s(pid), time.monotonic()
                        subprocess.run(cmd(s.mnt), check=True)
                        wall[s.name][phase].append(time.monotonic() - start)
                        cpu[s.name][phase].append(daemon_cpu_s(pid) - before)
                        os.unlink(s.mnt / "big")
                    finally:
                        s.teardown()
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)
    for s in systems:
        cells = ", ".join(
            f"{p} {statistics.median(wall[s.name][p]):.2f} s (daemon CPU {statistics.median(cpu[s.name][p]):.2f} s)"
            for p in phases
        )
        print(f"{s.name}: {cells}")
    bases = [(src, base.name) for src, base in zip(args.base, systems[:-1], strict=True)]
    pairs.fs_report("fs_big", args.rounds, bases, systems[-1].name, list(phases), wall, cpu, args.json)


if __name__ == "__main__":
    main()
