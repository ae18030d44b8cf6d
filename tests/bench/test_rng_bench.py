"""`strongroom rng bench --quick` runs every part for real and reports it (its figures are not asserted:
speed targets live in the benchmark, not in tests)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.serverproc import cli


def test_quick_rng_bench_measures_every_part(tmp_path: Path) -> None:
    out = tmp_path / "rng.json"
    r = cli("rng", "bench", "--quick", "--no-remote", "--out", str(out), timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    keygen = {row["source"]: row for row in report["keygen"]}
    for name in ("C getrandom(2)", "os.urandom(32)", "strongroom new_key()"):
        assert keygen[name]["ns_per_key"] > 0
    assert {"SP 800-90B RCT + APT", "FIPS 140-2 blocks", "ent statistics"} <= {t["test"] for t in report["testing"]}
    assert all(t["MBps"] > 0 for t in report["testing"])
    assert set(report["targets"]) >= {"new_key_met", "rdrand_met", "testing_met"}
    assert "remote: not measured (--no-remote)" in report["missing"]
    assert b"| 32-byte key from |" in r.stdout and b"target <= 1.25" in r.stdout
