"""A database's data directory on the mount, side by side with gocryptfs and the plain disk in one
run, rounds interleaved (each system goes first in turn):

- pgbench: a PostgreSQL 15 cluster owned by postgres on an --allow-other mount (its socket
  directory there too), scale 10, fsync on, 4 clients (2 threads) for SECONDS: transactions per
  second without the initial connection time;
- fio: 4 KiB random reads and writes (70/30) on a 256 MiB file, an fsync every 16 writes,
  psync, for SECONDS: read and write IOPS;
- a commit's write: an 8 KiB page rewritten in place and fdatasync'd, as a database's WAL
  writer does, 2,000 times on a 2 MiB file: the median latency in microseconds.

Medians over the rounds and each one's ratio to gocryptfs.  ``--base SRC`` adds another build of
Strongroom (its src directory) as one more system.

    .venv/bin/python bench/fs_db_pair.py [--rounds 3] [--seconds 30] [--base /tmp/base/src] [--json docs/bench/pairs/fs_db.json]
    .venv/bin/python bench/fs_db_pair.py --pgbench-only --rounds 8 --seconds 20 [--json ...]   # pgbench against gocryptfs
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from strongroom.bench import pairs
from strongroom.bench.fs import PASSPHRASE
from strongroom.fs import mount as fs_mount

PG_BIN = Path("/usr/lib/postgresql/15/bin")
AS_POSTGRES = ["runuser", "-u", "postgres", "--"]


class Mounted:
    """A directory a database can live in, owned by postgres: the plain disk or a mount."""

    def __init__(self, root: Path, name: str) -> None:
        self.root, self.name = root, name
        self.mnt = root / "mnt"
        self.proc: subprocess.Popen[bytes] | None = None

    def up(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        self.mnt.mkdir(exist_ok=True)
        self.mount()
        self.mnt.chmod(0o755)

    def mount(self) -> None:
        pass

    def down(self) -> None:
        pass


class Plain(Mounted):
    pass


class Gocryptfs(Mounted):
    def mount(self) -> None:
        cipher, pw = self.root / "cipher", self.root / "pw"
        pw.write_text(PASSPHRASE)
        if not cipher.exists():
            cipher.mkdir()
            subprocess.run(["gocryptfs", "-q", "-init", "-passfile", str(pw), str(cipher)], check=True, capture_output=True)
        subprocess.run(["gocryptfs", "-q", "-allow_other", "-passfile", str(pw), str(cipher), str(self.mnt)], check=True)

    def down(self) -> None:
        subprocess.run(["fusermount3", "-u", str(self.mnt)], check=False, capture_output=True)
        deadline = time.monotonic() + 30
        while fs_mount.mounted_at(self.mnt) is not None and time.monotonic() < deadline:
            time.sleep(0.05)


class Strongroom(Mounted):
    def __init__(self, root: Path, name: str, pythonpath: str | None = None) -> None:
        super().__init__(root, name)
        self.env = {**os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {})}

    def mount(self) -> None:
        vol, pw = self.root / "volume", self.root / "pw"
        pw.write_text(PASSPHRASE)
        if not vol.exists():
            make = "from pathlib import Path\nfrom strongroom.fs.volume import init_volume\n"
            make += f"init_volume(Path({str(vol)!r}), {PASSPHRASE!r})"
            subprocess.run([sys.executable, "-c", make], check=True, env=self.env)
        cmd = [sys.executable, "-m", "strongroom.cli.main", "fs", "mount", str(vol), str(self.mnt), "--foreground"]
        cmd += ["--allow-other", "--passphrase-file", str(pw)]
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while fs_mount.mounted_at(self.mnt) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: the mount did not come up")
            time.sleep(0.05)

    def down(self) -> None:
        subprocess.run(["fusermount3", "-u", str(self.mnt)], check=False, capture_output=True)
        if self.proc is not None:
            self.proc.wait(60)
            self.proc = None


def _as_postgres(*argv: str, timeout: float = 900) -> str:
    r = subprocess.run([*AS_POSTGRES, *argv], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {r.stdout[-1500:]}{r.stderr[-1500:]}")
    return r.stdout


def pgbench(place: Path, seconds: int) -> float:
    """TPS of pgbench (scale 10, 4 clients) on a cluster made in ``place``."""
    pw = pwd.getpwnam("postgres")
    home = place / "pg"
    home.mkdir(mode=0o700)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    data, sock = home / "data", home / "run"
    _as_postgres(str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--data-checksums")
    _as_postgres("mkdir", "-m", "0700", str(sock))
    opts = f"-k {sock} -c listen_addresses='' -c fsync=on -c synchronous_commit=on"
    ctl = [str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(home / "log"), "-w"]
    _as_postgres(*ctl, "start")
    try:
        bench = [str(PG_BIN / "pgbench"), "-h", str(sock), "-U", "postgres"]
        _as_postgres(*bench, "-q", "-i", "-s", "10", "postgres")
        out = _as_postgres(*bench, "-c", "4", "-j", "2", "-T", str(seconds), "postgres", timeout=seconds + 300)
    finally:
        _as_postgres(*ctl, "-m", "fast", "stop")
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
    if m is None:
        raise RuntimeError(f"no tps in pgbench's output: {out[-800:]}")
    return float(m.group(1))


def fio(place: Path, seconds: int) -> tuple[float, float]:
    """(read IOPS, write IOPS) of 4 KiB random I/O with an fsync every 16 writes."""
    job = [
        "fio", "--name=db", f"--filename={place / 'fio.dat'}", "--size=256M", "--rw=randrw", "--rwmixread=70",
        "--bs=4k", "--ioengine=psync", "--fsync=16", f"--runtime={seconds}", "--time_based", "--output-format=json",
    ]  # fmt: skip
    out = json.loads(subprocess.run(job, check=True, capture_output=True, text=True).stdout)["jobs"][0]
    return float(out["read"]["iops"]), float(out["write"]["iops"])


def commit_write(place: Path, times: int = 2000) -> float:
    """Median microseconds of an 8 KiB in-place pwrite followed by fdatasync."""
    path = place / "wal.dat"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        page = os.urandom(8192)
        for i in range(256):
            os.pwrite(fd, page, i * 8192)
        os.fsync(fd)
        took = []
        for i in range(times):
            t = time.perf_counter_ns()
            os.pwrite(fd, page, (i % 256) * 8192)
            os.fdatasync(fd)
            took.append(time.perf_counter_ns() - t)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(took) / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--base", action="append", default=[], help="another build's src directory")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--pgbench-only", action="store_true", help="pgbench alone, against gocryptfs alone: more rounds in the time")
    args = ap.parse_args()
    if shutil.which("fio") is None or not (PG_BIN / "pgbench").exists():
        sys.exit("needs fio and PostgreSQL 15 (scripts/install.sh installs both)")
    root = Path(tempfile.mkdtemp(prefix="sr-db-", dir="/var/tmp"))
    root.chmod(0o755)
    systems: list[Mounted] = [Gocryptfs(root / "gocryptfs", "gocryptfs")]
    if not args.pgbench_only:
        systems.insert(0, Plain(root / "plain", "plain"))
    systems += [Strongroom(root / f"base{i}", src, src) for i, src in enumerate(args.base)]
    systems.append(Strongroom(root / "this", "strongroom"))
    rows: tuple[str, ...] = ("pgbench tps", "fio read iops", "fio write iops", "8 KiB write+fdatasync us")
    if args.pgbench_only:
        rows = rows[:1]
    got: dict[str, dict[str, list[float]]] = {s.name: {r: [] for r in rows} for s in systems}
    try:
        for r in range(args.rounds):
            for s in systems[r % len(systems) :] + systems[: r % len(systems)]:
                s.up()
                try:
                    got[s.name]["pgbench tps"].append(pgbench(s.mnt, args.seconds))
                    shutil.rmtree(s.mnt / "pg")
                    if not args.pgbench_only:
                        reads, writes = fio(s.mnt, args.seconds)
                        got[s.name]["fio read iops"].append(reads)
                        got[s.name]["fio write iops"].append(writes)
                        got[s.name]["8 KiB write+fdatasync us"].append(commit_write(s.mnt))
                        (s.mnt / "fio.dat").unlink()
                finally:
                    s.down()
                print(f"round {r + 1} {s.name}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in got[s.name].items()), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    this = systems[-1].name
    rows_out = []
    for other in systems[:-1]:
        for row in rows:
            mine, theirs = got[this][row], got[other.name][row]
            ratio = statistics.median(a / b for a, b in zip(mine, theirs, strict=True))  # paired, per round
            rows_out.append(
                {"base": other.name, "phase": row, "Strongroom / it": ratio, "Strongroom": statistics.median(mine),
                 "it": statistics.median(theirs)}
            )  # fmt: skip
            m, t = statistics.median(mine), statistics.median(theirs)
            print(f"{row}: Strongroom {m:.0f}, {other.name} {t:.0f}, paired ratio {ratio:.2f}")
    if args.json is not None:
        others = {"plain": "the plain disk (ext4), no encryption", "gocryptfs": _gocryptfs_version()}
        pairs.save(args.json, "fs_db", args.rounds, list(args.base), rows_out, others)


def _gocryptfs_version() -> str:
    r = subprocess.run(["gocryptfs", "-version"], capture_output=True, text=True, check=False)
    return r.stdout.split(";")[0].strip() or "gocryptfs"


if __name__ == "__main__":
    main()
