"""Entry point: python bench/entropy_configs.py [--quick] [--out DIR] (= strongroom bench --only entropy)."""

import sys

from strongroom.cli.bench_cmds import bench

if __name__ == "__main__":
    bench(["--only", "entropy", *sys.argv[1:]], prog_name="strongroom bench")
