"""Entry point: python bench/all.py [--quick] [--only SUITE...] [--out DIR] (= strongroom bench)."""

from strongroom.cli.bench_cmds import bench

if __name__ == "__main__":
    bench(prog_name="strongroom bench")
