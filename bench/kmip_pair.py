"""KMIP side by side with PyKMIP's own server (strongroom/bench/kmip.py): Get and Create of AES
keys at 16 TLS connections from one C load generator, with Strongroom's own HTTPS get in the
same rounds; --json stores the run for docs/BENCHMARKS.md.

    .venv/bin/python bench/kmip_pair.py --rounds 5 --seconds 3 --json docs/bench/pairs/kmip.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

from strongroom.bench import kmip, pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2, help="Strongroom's worker processes")
    ap.add_argument("--json", type=Path, help="store the run here (docs/bench/pairs/kmip.json for the report)")
    args = ap.parse_args()
    rows = kmip.run(args.rounds, args.seconds, args.connections, args.workers)
    others = {"PyKMIP": "PyKMIP 0.10's server (its engine, SQLite, TLS with client certificates)"}
    print(pairs.table({"rows": rows, "bases": others}))
    if args.json is not None:
        pairs.save(args.json, "kmip", args.rounds, [], rows, others)


if __name__ == "__main__":
    main()
