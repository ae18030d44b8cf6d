"""Entry point: python bench/entropy_configs.py [--quick] [--out FILE]."""

from strongroom.bench.entropy_configs import main

if __name__ == "__main__":
    raise SystemExit(main())
