"""Entry point: python bench/bulk.py [--quick] [--out FILE]."""

from strongroom.bench.bulk import main

if __name__ == "__main__":
    raise SystemExit(main())
