"""Appenders through a real mount: processes and threads, each on its own O_APPEND descriptor,
through several hard-link names of one file and through one name.  Every record must arrive
whole, exactly once, and each writer's records in the order it wrote them (ext4 and gocryptfs
keep all of them; before the daemon placed appends itself, two names kept as few as 0 of 6,000)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fs.mounts import Mount
from tests.serverproc import cli

RECORDS = 6000  # per run, over every writer
PROCESSES, THREADS = 3, 2
RUNS = 4

WRITER = r"""
import os, sys, threading
names, proc, threads, each = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
go = threading.Barrier(threads)
def write(t):
    w = proc * threads + t
    fd = os.open(names[w % len(names)], os.O_WRONLY | os.O_APPEND)
    go.wait()
    for i in range(each):
        # lengths vary with i, so a record cut or overlapped by another cannot parse
        rec = b"<%02d:%06d:%s>\n" % (w, i, b"x" * (i % 53))
        n = os.write(fd, rec)
        if n != len(rec):
            print(f"short write {n} of {len(rec)}", file=sys.stderr)
            os._exit(3)
    os.close(fd)
ts = [threading.Thread(target=write, args=(t,)) for t in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
"""


def _append_run(names: list[Path]) -> bytes:
    each = RECORDS // (PROCESSES * THREADS)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, ",".join(map(str, names)), str(p), str(THREADS), str(each)],
            stderr=subprocess.PIPE,
        )
        for p in range(PROCESSES)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    return names[0].read_bytes()


def _check(data: bytes) -> None:
    each = RECORDS // (PROCESSES * THREADS)
    records = data.split(b"\n")
    assert records[-1] == b""  # ends with a whole record
    records = records[:-1]
    seen: dict[int, list[int]] = {}
    for r in records:
        m = re.fullmatch(rb"<(\d\d):(\d{6}):(x*)>", r)
        assert m is not None, f"torn or overlapped record {r[:80]!r}"
        w, i = int(m.group(1)), int(m.group(2))
        assert len(m.group(3)) == i % 53, f"record {r[:80]!r} has the wrong length"
        seen.setdefault(w, []).append(i)
    assert len(records) == RECORDS, f"{len(records)} of {RECORDS} records"
    for w in range(PROCESSES * THREADS):
        assert seen.get(w) == list(range(each)), f"writer {w}'s records are missing or out of order"


@pytest.mark.parametrize("names", [3, 1], ids=["three-hard-link-names", "one-name"])
def test_appenders_keep_every_record_in_order(vol: Mount, names: int) -> None:
    for run in range(RUNS):
        first = vol.mnt / f"log{run}"
        first.write_bytes(b"")
        paths = [first]
        for k in range(1, names):
            link = vol.mnt / f"log{run}.name{k}"
            os.link(first, link)
            paths.append(link)
        data = _append_run(paths)
        _check(data)
        for p in paths:  # every name shows the same file at once
            assert p.read_bytes() == data
            assert p.stat().st_size == len(data) and p.stat().st_nlink == names


def test_appends_through_two_names_in_turn(vol: Mount) -> None:
    """The shell's `>>` through two names: each append lands after the other's."""
    n1, n2 = vol.mnt / "n1", vol.mnt / "n2"
    subprocess.run(["sh", "-c", f"echo first > {n1}; ln {n1} {n2}; echo second >> {n1}; echo third >> {n2}"], check=True)
    assert n1.read_bytes() == n2.read_bytes() == b"first\nsecond\nthird\n"
    r = cli("fs", "fsck", str(vol.lower), "--passphrase-file", str(vol.pwfile))
    assert r.returncode == 0, r.stdout + r.stderr
