"""The public POSIX suite pjdfstest, built from the conformance copy beside the repository (never
copied into it) into a temporary directory, and run whole with `prove` inside a mount."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Where the conformance suites live: STRONGROOM_CONFORMANCE if set, else shared/conformance beside
# the checkout or beside any directory above it (../shared/conformance for the project's own
# checkout), else the workplace's copy.
CANDIDATES = [
    *([Path(os.environ["STRONGROOM_CONFORMANCE"])] if "STRONGROOM_CONFORMANCE" in os.environ else []),
    *(parent / "shared" / "conformance" for parent in REPO.parents),
    Path("/work/shared/conformance"),
]


def source() -> Path:
    for c in CANDIDATES:
        if (c / "pjdfstest" / "pjdfstest.c").is_file():
            return c / "pjdfstest"
    raise FileNotFoundError(f"pjdfstest's source is not in any of {[str(c) for c in CANDIDATES]}")


def build(into: Path) -> Path:
    """Build the suite's helper binary; returns the suite's directory (its tests/ beside it)."""
    tree = into / "pjdfstest"
    shutil.copytree(source(), tree)
    for argv in (["autoreconf", "-ifs"], ["./configure"], ["make", "pjdfstest"]):
        r = subprocess.run(argv, cwd=tree, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"building pjdfstest: {' '.join(argv)} failed: {(r.stdout + r.stderr)[-2000:]}")
    return tree


class Result:
    """What a whole-suite `prove -r` run reported."""

    def __init__(self, output: str) -> None:
        self.output = output
        m = re.search(r"^Files=(\d+), Tests=(\d+)", output, re.M)
        self.files, self.tests = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        self.failed: set[tuple[str, int]] = set()
        self.broken: list[str] = []  # test files that died or whose output did not parse
        summary = output.split("Test Summary Report", 1)[1] if "Test Summary Report" in output else ""
        current = None
        listing = False
        for line in summary.splitlines():
            head = re.match(r"^(\S+/tests/(\S+\.t))\s+\(Wstat: (\d+) Tests: (\d+) Failed: (\d+)\)", line)
            if head:
                current, listing = head.group(2), False
                if head.group(3) != "0":
                    self.broken.append(f"{current}: exited with wait status {head.group(3)}")
                continue
            if current is None:
                continue
            stripped = line.strip()
            if stripped.startswith("Failed test"):
                listing = True
                stripped = stripped.split(":", 1)[1]
            elif stripped.startswith(("TODO passed", "Parse errors", "Non-zero")):
                listing = False
                if not stripped.startswith("TODO passed"):
                    self.broken.append(f"{current}: {stripped}")
                continue
            elif not listing or not re.match(r"^[\d ,-]+$", stripped):
                listing = False
                continue
            for part in stripped.split(","):
                part = part.strip()
                if not part:
                    continue
                lo, _, hi = part.partition("-")
                for n in range(int(lo), int(hi or lo) + 1):
                    self.failed.add((current, n))


def run(suite: Path, cwd: Path, timeout: float = 1500) -> Result:
    """Run every test under suite/tests as root with ``cwd`` (a directory inside the mount)."""
    r = subprocess.run(["prove", "-r", str(suite / "tests")], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return Result(r.stdout + r.stderr)
