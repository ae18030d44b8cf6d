"""Entry point: python bench/rng.py [--quick] [--no-remote] [--out FILE]."""

from strongroom.bench.rng import main

if __name__ == "__main__":
    raise SystemExit(main())
