"""Sequential A/B of two builds of the daemon, with gocryptfs beside them, interleaved: write
a file with dd (1 MiB blocks, fsync at the end), drop caches, read it back; medians over rounds
and each one's ratio to gocryptfs (throughput: above 1.00x is faster).

    git worktree add /tmp/base HEAD~1   (then copy the built .so files, as fs_small_pair.py says)
    (bench/fs.py --base runs the whole filesystem suite the same way)
    .venv/bin/python bench/fs_seq_pair.py --base /tmp/base/src --mib 1024 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from strongroom.bench.fs import Gocryptfs, Strongroom, System, _timed, drop_caches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rounds", type=int, nargs="?", default=3)
    ap.add_argument("--base", required=True, help="the other build's src directory (put first on PYTHONPATH)")
    ap.add_argument("--mib", type=int, default=1024)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(dir="/var/tmp"))
    systems: list[System] = [
        Gocryptfs(root / "g"), Strongroom(root / "base", "base", args.base), Strongroom(root / "this", "this", None)
    ]
    rates: dict[str, dict[str, list[float]]] = {s.name: {"write": [], "read": []} for s in systems}
    for r in range(args.rounds):
        for s in systems if r % 2 == 0 else systems[::-1]:
            s.setup(True)
            try:
                target = s.mnt / "seq"
                drop_caches()
                w = _timed(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={args.mib}", "conv=fsync", "status=none"])
                drop_caches()
                rd = _timed(["dd", f"if={target}", "of=/dev/null", "bs=1M", "status=none"])
                os.unlink(target)
                rates[s.name]["write"].append(args.mib / w)
                rates[s.name]["read"].append(args.mib / rd)
            finally:
                s.teardown()
    ref = {k: statistics.median(v) for k, v in rates["gocryptfs"].items()}
    for s in systems:
        cells = ", ".join(
            f"{k} {statistics.median(v):.0f} MiB/s ({statistics.median(v) / ref[k]:.2f}x)" for k, v in rates[s.name].items()
        )
        print(f"{s.name}: {cells}")


if __name__ == "__main__":
    main()
