"""The filesystem benchmark: plain directory, gocryptfs and Strongroom side by side on the same
disk in one run -- 1 GiB sequential write (fsync'd) and cold read, a large-file copy (the
disk-encryption article's ISO copy, scaled), a tree of 4,310 small files (tar x, ls -lR cold,
rm -rf), each with AES-NI on and off -- plus the Strongroom daemon's peak RSS.

The read is cold: the file is written and fsync'd, the file system unmounted and mounted again
(neither the kernel nor the daemon keeps anything of it), the page cache dropped, then dd reads
it in 1 MiB blocks.  ``--base SRC`` adds another build of Strongroom (its src directory, e.g. a
git worktree of an earlier commit) as one more system in the same run, for before/after.

    .venv/bin/python bench/fs.py [--quick] [--rounds N] [--base /tmp/base/src] [--dir /var/tmp] [--out bench-results/fs.json]
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom.bench import procs
from strongroom.fs import mount as fs_mount

# AES-NI (and the carry-less multiply GCM needs) off: the cryptography wheel's OpenSSL needs VAES
# and VPCLMULQDQ masked too; the system OpenSSL (gocryptfs -openssl) takes the shorter mask.
AESNI_OFF_WHEEL = "~0x200000200000000:~0x60000000000"
AESNI_OFF_SYSTEM = "~0x200000200000000:~0"
PASSPHRASE = "benchmark passphrase"  # noqa: S105 - a throwaway volume


def drop_caches() -> None:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass  # not root: reads may come from the page cache (reported in the results)


def _timed(cmd: list[str] | Callable[[], object], env: dict[str, str] | None = None) -> float:
    t = time.perf_counter()
    if callable(cmd):
        cmd()
    else:
        subprocess.run(cmd, check=True, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def make_tree_tar(path: Path, files: int) -> None:
    """A reproducible source-tree-like tarball: `files` files in nested directories, sizes
    spread like a source tree (most under 8 KiB, a few larger)."""
    rng = random.Random(20261130)
    with tarfile.open(path, "w") as tar:
        for i in range(files):
            d = f"pkg{i % 37}/mod{i % 11}/part{i % 5}"
            size = int(rng.lognormvariate(8, 1.2)) % 200_000
            info = tarfile.TarInfo(f"tree/{d}/file{i}.py")
            info.size = size
            info.mtime = 1_700_000_000
            tar.addfile(info, io.BytesIO(rng.randbytes(size)))


class System:
    name = ""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mnt = root / "mnt"

    def setup(self, aesni: bool) -> None:
        self.mnt.mkdir(parents=True, exist_ok=True)

    def teardown(self) -> None:
        pass

    def pid(self) -> int | None:
        return None


class Plain(System):
    name = "plain"


class Gocryptfs(System):
    name = "gocryptfs"

    def setup(self, aesni: bool) -> None:
        super().setup(aesni)
        cipher = self.root / "cipher"
        pw = self.root / "pw"
        pw.write_text(PASSPHRASE)
        if not cipher.exists():
            cipher.mkdir()
            subprocess.run(["gocryptfs", "-q", "-init", "-passfile", str(pw), str(cipher)], check=True, capture_output=True)
        env = {**os.environ}
        args = ["gocryptfs", "-q", "-passfile", str(pw)]
        if not aesni:
            env["OPENSSL_ia32cap"] = AESNI_OFF_SYSTEM
            args.append("-openssl=true")  # Go's own GCM has no switch; OpenSSL's honours the mask
        subprocess.run([*args, str(cipher), str(self.mnt)], check=True, env=env, capture_output=True)

    def teardown(self) -> None:
        pid = self.pid()
        subprocess.run(["fusermount3", "-u", str(self.mnt)], check=False, capture_output=True)
        # fusermount returns before the daemon exits: wait for it, as Strongroom's teardown waits
        # for its own, so its exit does not overlap the next system's first measurement
        deadline = time.monotonic() + 30
        while pid is not None and Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    def pid(self) -> int | None:
        out = subprocess.run(["pgrep", "-f", f"gocryptfs .*{self.mnt}"], capture_output=True, text=True).stdout.split()
        return int(out[0]) if out else None


class Strongroom(System):
    name = "strongroom"

    def __init__(self, root: Path, name: str = "strongroom", pythonpath: str | None = None) -> None:
        """``pythonpath``: another build's src directory, put first on the daemon's PYTHONPATH."""
        super().__init__(root)
        self.name = name
        self.pythonpath = pythonpath
        self.proc: subprocess.Popen[bytes] | None = None

    def setup(self, aesni: bool) -> None:
        super().setup(aesni)
        vol = self.root / "volume"
        env = {**os.environ}
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        if not vol.exists():  # made by the build that mounts it, in its own format version
            make = (
                "from pathlib import Path\nfrom strongroom.fs.volume import init_volume\n"
                f"init_volume(Path({str(vol)!r}), {PASSPHRASE!r})"
            )
            subprocess.run([sys.executable, "-c", make], check=True, env=env)
        pw = self.root / "pw"
        pw.write_text(PASSPHRASE)
        if not aesni:
            env["OPENSSL_ia32cap"] = AESNI_OFF_WHEEL
        self.proc = mount_daemon(vol, self.mnt, pw, env)

    def teardown(self) -> None:
        if self.proc is not None:
            subprocess.run(["fusermount3", "-u", str(self.mnt)], check=False, capture_output=True)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
            self.proc = None

    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid


def mount_daemon(
    vol: Path, mnt: Path, pw: Path, env: dict[str, str] | None = None, args: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """`strongroom fs mount --foreground [ARGS]` in a child process; returns once the mount is up."""
    cmd = [sys.executable, "-m", "strongroom.cli.main", "fs", "mount", str(vol), str(mnt), "--foreground", *(args or [])]
    proc = subprocess.Popen([*cmd, "--passphrase-file", str(pw)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while fs_mount.mounted_at(mnt) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("strongroom mount did not come up")
        time.sleep(0.02)
    return proc


def peak_rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def paired_ratio(after: list[float], before: list[float]) -> float:
    """The median of per-round ratios of two builds measured in the same rounds: steadier on a
    noisy machine than a ratio of medians."""
    return statistics.median(a / b for a, b in zip(after, before, strict=True) if b > 0)


def daemon_cpu_s(pid: int | None) -> float:
    """A daemon's CPU time so far (user + system), 0 for no daemon: steadier than wall time on a
    noisy machine, and what a change to the daemon moves."""
    return 0.0 if pid is None else procs.cpu_seconds([pid])


def run_suite(system: System, aesni: bool, big: Path, tree_tar: Path, mib: int) -> dict[str, Any]:
    system.setup(aesni)
    try:
        m = system.mnt
        row: dict[str, Any] = {"system": system.name, "aesni": aesni}

        def phase(name: str, cmd: list[str] | Callable[[], object]) -> None:
            pid = system.pid()
            cpu = daemon_cpu_s(pid)
            row[f"{name}_s"] = _timed(cmd)
            row[f"cpu_{name}_s"] = daemon_cpu_s(pid) - cpu

        drop_caches()
        phase("write", ["dd", "if=/dev/zero", f"of={m}/seq", "bs=1M", f"count={mib}", "conv=fsync", "status=none"])
        system.teardown()  # a cold read: nothing of the file left in the kernel or the daemon
        system.setup(aesni)
        drop_caches()
        phase("read", ["dd", f"if={m}/seq", "of=/dev/null", "bs=1M", "status=none"])
        os.unlink(m / "seq")
        drop_caches()

        def copy() -> None:
            subprocess.run(["cp", str(big), str(m / "copy.iso")], check=True)  # the article's ISO copy
            os.sync()

        phase("copy", copy)
        os.unlink(m / "copy.iso")
        drop_caches()
        phase("tar_x", ["tar", "xf", str(tree_tar), "-C", str(m)])
        os.sync()
        drop_caches()
        phase("ls_lR", ["ls", "-lR", str(m / "tree")])
        phase("rm_rf", ["rm", "-rf", str(m / "tree")])
        row["write_MiBps"] = round(mib / row["write_s"], 1)
        row["read_MiBps"] = round(mib / row["read_s"], 1)
        row["copy_MiBps"] = round(mib / row["copy_s"], 1)
        row["peak_rss_mib"] = peak_rss_mib(system.pid())
        for k in list(row):
            if k.endswith("_s"):
                row[k] = round(row[k], 3)
        return row
    finally:
        system.teardown()


def run(
    quick: bool = False,
    base: Path = Path("/var/tmp"),
    rounds: int = 1,
    progress: Callable[[str], None] = print,
    base_build: str | None = None,
) -> dict[str, Any]:
    mib = 64 if quick else 1024
    files = 500 if quick else 4310
    report: dict[str, Any] = {
        "quick": quick,
        "mib": mib,
        "files": files,
        "rows": [],
        "missing": [],
        "lower_disk_read_ahead_kb": _lower_read_ahead_kb(base),
    }
    if base_build:
        report["base_build"] = base_build
    if shutil.which("gocryptfs") is None:
        report["missing"].append("gocryptfs (apt-get install gocryptfs)")
    with tempfile.TemporaryDirectory(prefix="strongroom-fsbench-", dir=base) as tmp:
        root = Path(tmp)
        big = root / "big.iso"
        with open(big, "wb") as f:
            for _ in range(mib):
                f.write(os.urandom(1 << 20))
        tree_tar = root / "tree.tar"
        make_tree_tar(tree_tar, files)
        systems: list[System] = [Plain(root / "plain"), Strongroom(root / "strongroom")]
        if base_build:
            systems.append(Strongroom(root / "base", "strongroom-base", base_build))
        if shutil.which("gocryptfs"):
            systems.insert(1, Gocryptfs(root / "gocryptfs"))
        for r in range(rounds):
            for aesni in (True, False):
                for s in systems if r % 2 == 0 else systems[::-1]:  # neither peer always goes first
                    if s.name == "plain" and not aesni:
                        continue
                    progress(f"round {r + 1}: {s.name}, AES-NI {'on' if aesni else 'off'}")
                    report["rows"].append(run_suite(s, aesni, big, tree_tar, mib))
    report["summary"] = summarize(report["rows"])
    return report


def _lower_read_ahead_kb(path: Path) -> int | None:
    """The read-ahead of the disk under ``path`` (a partition's is its disk's): cold reads depend on it."""
    dev = os.stat(path).st_dev
    block = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve()
    for queue in (block / "queue", block.parent / "queue"):
        try:
            return int((queue / "read_ahead_kb").read_text())
        except (OSError, ValueError):
            continue
    return None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for aesni in (True, False):
        by = {}
        for name in ("plain", "gocryptfs", "strongroom", "strongroom-base"):
            sel = [r for r in rows if r["system"] == name and (r["aesni"] == aesni or name == "plain")]
            if sel:
                by[name] = {k: statistics.median(r[k] for r in sel) for k in sel[0] if k.endswith("_s")}
        if "gocryptfs" in by and "strongroom" in by:
            s, g = by["strongroom"], by["gocryptfs"]
            out["aesni_on" if aesni else "aesni_off"] = {
                "write_throughput_vs_gocryptfs": round(g["write_s"] / s["write_s"], 2),
                "read_throughput_vs_gocryptfs": round(g["read_s"] / s["read_s"], 2),
                "copy_time_vs_gocryptfs": round(s["copy_s"] / g["copy_s"], 2),
                "tar_x_time_vs_gocryptfs": round(s["tar_x_s"] / g["tar_x_s"], 2),
                "ls_lR_time_vs_gocryptfs": round(s["ls_lR_s"] / g["ls_lR_s"], 2),
                "rm_rf_time_vs_gocryptfs": round(s["rm_rf_s"] / g["rm_rf_s"], 2),
                "write_overhead_vs_plain_pct": round((s["write_s"] / by["plain"]["write_s"] - 1) * 100),
                "read_overhead_vs_plain_pct": round((s["read_s"] / by["plain"]["read_s"] - 1) * 100),
            }
            if "strongroom-base" in by:  # before/after: above 1.00 the new build is faster
                b = by["strongroom-base"]
                out["aesni_on" if aesni else "aesni_off"]["speed_vs_base"] = {
                    k[: -len("_s")]: round(b[k] / s[k], 2) for k in s if k in b and s[k]
                }
    return out


def table(report: dict[str, Any]) -> str:
    lines = [
        "| system | AES-NI | write MiB/s | read MiB/s | copy MiB/s | tar x s | ls -lR s | rm -rf s | peak RSS MiB |"
        " daemon CPU s: write, read, copy, tar x, ls -lR, rm -rf |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        cpu = ", ".join(str(r.get(f"cpu_{k}_s", "")) for k in ("write", "read", "copy", "tar_x", "ls_lR", "rm_rf"))
        lines.append(
            f"| {r['system']} | {'on' if r['aesni'] else 'off'} | {r['write_MiBps']} | {r['read_MiBps']} | {r['copy_MiBps']} | "
            f"{r['tar_x_s']} | {r['ls_lR_s']} | {r['rm_rf_s']} | {r['peak_rss_mib'] or ''} | {cpu} |"
        )
    for k, v in report["summary"].items():
        lines.append(f"{k}: " + ", ".join(f"{a}={b}" for a, b in v.items()))
    lines += [f"MISSING: {m}" for m in report["missing"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp"))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("bench-results/fs.json"))
    ap.add_argument("--base", help="another build's src directory, run as one more system (before/after)")
    args = ap.parse_args(argv)
    report = run(args.quick, args.dir, args.rounds, base_build=args.base)
    print(table(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"results in {args.out}")
    return 0
