"""Entry point: python bench/keyserver.py [--quick] [--seconds N] [--out FILE]."""

from strongroom.bench.keyserver import main

if __name__ == "__main__":
    raise SystemExit(main())
