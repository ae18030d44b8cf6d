"""Sequential A/B of two builds of the daemon, with gocryptfs beside them, interleaved: write
a file with dd (1 MiB blocks, fsync at the end), mount again, drop caches, read it back cold;
medians over rounds and each one's ratio to gocryptfs (throughput: above 1.00x is faster).

``--mount-read-ahead-kb 128`` sets every mount's read-ahead after it mounts, as a daemon that
cannot write sysfs (not root) leaves it: the kernel's default 128 KiB, so a sequential reader's
requests come 128 KiB at a time.  The disk's own read-ahead is what
/sys/block/DISK/queue/read_ahead_kb says (printed with the results).

    git worktree add /tmp/base HEAD~1   (then copy the built .so files, as fs_small_pair.py says)
    (bench/fs.py --base runs the whole filesystem suite the same way)
    .venv/bin/python bench/fs_seq_pair.py --base /tmp/base/src --mib 512 [--mount-read-ahead-kb 128] 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from strongroom.bench.fs import Gocryptfs, Strongroom, System, _lower_read_ahead_kb, _timed, drop_caches


def _set_mount_read_ahead(mnt: Path, kb: int) -> None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(mnt):
            Path(f"/sys/class/bdi/{fields[2]}/read_ahead_kb").write_text(str(kb))
            return
    raise RuntimeError(f"{mnt} is not mounted")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rounds", type=int, nargs="?", default=3)
    ap.add_argument("--base", required=True, help="the other build's src directory (put first on PYTHONPATH)")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--mount-read-ahead-kb", type=int, help="every mount's read-ahead, set after it mounts")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(dir="/var/tmp"))
    systems: list[System] = [
        Gocryptfs(root / "g"),
        Strongroom(root / "base", "base", args.base),
        Strongroom(root / "this", "this", None),
    ]
    rates: dict[str, dict[str, list[float]]] = {s.name: {"write": [], "read": []} for s in systems}
    for r in range(args.rounds):
        for s in systems if r % 2 == 0 else systems[::-1]:
            s.setup(True)
            try:
                target = s.mnt / "seq"
                drop_caches()
                w = _timed(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={args.mib}", "conv=fsync", "status=none"])
                s.teardown()
                s.setup(True)
                if args.mount_read_ahead_kb:
                    _set_mount_read_ahead(s.mnt, args.mount_read_ahead_kb)
                drop_caches()
                rd = _timed(["dd", f"if={target}", "of=/dev/null", "bs=1M", "status=none"])
                os.unlink(target)
                rates[s.name]["write"].append(args.mib / w)
                rates[s.name]["read"].append(args.mib / rd)
            finally:
                s.teardown()
    print(f"disk read-ahead {_lower_read_ahead_kb(root)} KiB, mount read-ahead {args.mount_read_ahead_kb or 'as mounted'} KiB")
    ref = {k: statistics.median(v) for k, v in rates["gocryptfs"].items()}
    for s in systems:
        cells = ", ".join(
            f"{k} {statistics.median(v):.0f} MiB/s ({statistics.median(v) / ref[k]:.2f}x; rounds {[round(x) for x in v]})"
            for k, v in rates[s.name].items()
        )
        print(f"{s.name}: {cells}")


if __name__ == "__main__":
    main()
