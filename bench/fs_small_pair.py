"""Small-file A/B of two builds of the daemon: this checkout against another one's sources
(e.g. the previous commit in a git worktree), with gocryptfs beside them, interleaved.

tar x, chmod -R, ls -lR (cold) and rm -rf of a generated tree; wall time and the daemon's CPU
time (user + system, from /proc) for each; medians over rounds, and each one's ratio to gocryptfs.
``--base`` may be given more than once (several earlier builds side by side).

    git worktree add /tmp/base HEAD~1
    (cd /tmp/base && $OLDPWD/.venv/bin/python setup.py -q build_ext --inplace)  # its helpers
    # (a commit from before setup.py: grep '^cc ' scripts/install.sh | bash, in the worktree)
    .venv/bin/python bench/fs_small_pair.py --base /tmp/base/src --files 4310 4
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from strongroom.bench import pairs
from strongroom.bench.fs import Gocryptfs, Strongroom, System, _timed, daemon_cpu_s, drop_caches, make_tree_tar


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rounds", type=int, nargs="?", default=3)
    ap.add_argument("--base", action="append", required=True, help="another build's src directory (put first on PYTHONPATH)")
    ap.add_argument("--files", type=int, default=1500)
    ap.add_argument("--json", type=Path, help="also write the paired ratios here (docs/bench/pairs/fs_small.json for the report)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(dir="/var/tmp"))
    tree = root / "tree.tar"
    make_tree_tar(tree, args.files)
    systems: list[System] = [Gocryptfs(root / "g")]
    systems += [Strongroom(root / f"base{i}", f"base {src}", src) for i, src in enumerate(args.base)]
    systems.append(Strongroom(root / "this", "this", None))
    ops = ("tar x", "chmod -R", "ls -lR", "rm -rf")
    wall: dict[str, dict[str, list[float]]] = {s.name: {op: [] for op in ops} for s in systems}
    cpu: dict[str, dict[str, list[float]]] = {s.name: {op: [] for op in ops} for s in systems}
    try:
        for r in range(args.rounds):
            for s in systems[r % len(systems) :] + systems[: r % len(systems)]:  # each goes first in turn
                s.setup(True)
                try:
                    pid = s.pid()
                    cmds = {
                        "tar x": ["tar", "xf", str(tree), "-C", str(s.mnt)],
                        "chmod -R": ["chmod", "-R", "go-w", str(s.mnt / "tree")],
                        "ls -lR": ["ls", "-lR", str(s.mnt / "tree")],
                        "rm -rf": ["rm", "-rf", str(s.mnt / "tree")],
                    }
                    for op in ops:
                        if op in ("tar x", "ls -lR"):  # rm -rf follows the listing, as in the full bench
                            drop_caches()
                        before = daemon_cpu_s(pid)
                        wall[s.name][op].append(_timed(cmds[op]))
                        cpu[s.name][op].append(daemon_cpu_s(pid) - before)
                finally:
                    s.teardown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ref = {op: statistics.median(v) for op, v in wall["gocryptfs"].items()}
    for s in systems:
        cells = ", ".join(
            f"{op} {statistics.median(wall[s.name][op]):.2f} s ({statistics.median(wall[s.name][op]) / ref[op]:.2f}x,"
            f" daemon CPU {statistics.median(cpu[s.name][op]):.2f} s)"
            for op in ops
        )
        print(f"{s.name}: {cells}")
    bases = [(src, base.name) for src, base in zip(args.base, systems[1:-1], strict=True)]
    pairs.fs_report("fs_small", args.rounds, bases, systems[-1].name, list(ops), wall, cpu, args.json)


if __name__ == "__main__":
    main()
