"""The Vault-compatible API side by side with OpenBao (strongroom/bench/vault.py): KV v2 read and
write, transit encrypt and decrypt of 32 bytes, a 1,000-item batch encrypt, 16 connections, TLS
and audit on, each round in another order (balanced over four rounds); --json stores the run for docs/BENCHMARKS.md.

    .venv/bin/python bench/vault_pair.py --rounds 8 --seconds 3 --json docs/bench/pairs/vault.json
    .venv/bin/python bench/vault_pair.py --base /tmp/base/src ...   # a build before a change, in the same rounds
"""

from __future__ import annotations

import argparse
from pathlib import Path

from strongroom.bench import pairs, vault


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2, help="Strongroom's worker processes")
    ap.add_argument("--json", type=Path, help="store the run here (docs/bench/pairs/vault.json for the report)")
    ap.add_argument("--base", type=Path, help="another build's src directory, run beside this one (before / after)")
    args = ap.parse_args()
    rows = vault.run(args.rounds, args.seconds, args.connections, args.workers, base_src=args.base)
    others = {"OpenBao": "OpenBao (bao server, raft, TLS, file audit)"}
    print(pairs.table({"rows": rows, "bases": others}))
    if args.json is not None:
        pairs.save(args.json, "vault", args.rounds, [str(args.base)] if args.base else [], rows, others)


if __name__ == "__main__":
    main()
