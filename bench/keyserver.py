"""Entry point: python bench/keyserver.py [--quick] [--seconds N] [--out FILE]."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from strongroom.bench.keyserver import run
from strongroom.bench.report import keyserver_table


def main(argv: list[str] | None = None) -> int:

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench-results/keyserver.json"))
    ap.add_argument("--no-peers", action="store_true", help="Measure Strongroom only.")
    args = ap.parse_args(argv)
    try:
        result = run(args.quick, 2 if args.quick else args.seconds, not args.no_peers)
    except RuntimeError as e:
        raise SystemExit(str(e)) from None
    print("\n" + keyserver_table(result))  # its MISSING lines included
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
