"""Small-file A/B: gocryptfs and Strongroom, interleaved.

The bench's 4,310-file tree: tar x, ls -lR (cold), rm -rf; medians over rounds and each one's
ratio to gocryptfs.  Rounds alternate the systems' order, since this machine's speed drifts.

    .venv/bin/python bench/fs_small_ab.py [ROUNDS]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from strongroom.bench.fs import Gocryptfs, Strongroom, System, _timed, drop_caches, make_tree_tar


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    root = Path(tempfile.mkdtemp(dir="/var/tmp"))
    tree = root / "tree.tar"
    make_tree_tar(tree, 4310)
    systems: list[System] = [Gocryptfs(root / "g"), Strongroom(root / "s")]
    times: dict[str, dict[str, list[float]]] = {s.name: {"tar x": [], "ls -lR": [], "rm -rf": []} for s in systems}
    for r in range(rounds):
        for s in systems if r % 2 == 0 else systems[::-1]:
            s.setup(True)
            try:
                drop_caches()
                times[s.name]["tar x"].append(_timed(["tar", "xf", str(tree), "-C", str(s.mnt)]))
                os.sync()
                drop_caches()
                times[s.name]["ls -lR"].append(_timed(["ls", "-lR", str(s.mnt / "tree")]))
                times[s.name]["rm -rf"].append(_timed(["rm", "-rf", str(s.mnt / "tree")]))
            finally:
                s.teardown()
    base = {k: statistics.median(v) for k, v in times["gocryptfs"].items()}
    for name, ops in times.items():
        cells = ", ".join(f"{op} {statistics.median(v):.2f} s ({statistics.median(v) / base[op]:.2f}x)" for op, v in ops.items())
        print(f"{name}: {cells}")


if __name__ == "__main__":
    main()
