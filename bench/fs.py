"""Entry point: python bench/fs.py [--quick] [--dir DIR] [--rounds N] [--out FILE]."""

from strongroom.bench.fs import main

if __name__ == "__main__":
    raise SystemExit(main())
