"""Entry point: python bench/bulk.py [--quick] [--out DIR] (= strongroom bench --only bulk)."""

import sys

from strongroom.cli.bench_cmds import bench

if __name__ == "__main__":
    bench(["--only", "bulk", *sys.argv[1:]], prog_name="strongroom bench")
