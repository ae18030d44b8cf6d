"""Entry point: python bench/acl.py [--quick] [--out FILE]."""

from strongroom.bench.acl import main

if __name__ == "__main__":
    raise SystemExit(main())
