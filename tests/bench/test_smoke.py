"""`strongroom bench --quick`, the CI smoke run: every suite runs for real and the report is
complete (results.json, report.md, every chart).  Its figures are not asserted: speed targets live
in the benchmark, not in tests.  scripts/test.sh runs it alone, after the rest of the suite, so it
neither disturbs nor is disturbed by the parallel tests."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from strongroom.bench import acl as acl_bench
from strongroom.bench import report as bench_report
from strongroom.cli.bench_cmds import SUITE_NAMES
from tests.serverproc import cli

pytestmark = pytest.mark.smoke


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_quick_bench_writes_a_complete_report(tmp_path: Path) -> None:
    out = tmp_path / "report"
    r = cli("bench", "--quick", "--out", str(out), "--json", timeout=600)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    summary = json.loads(r.stdout)
    assert summary["failed"] == []
    results = json.loads((out / "results.json").read_text())
    assert list(results["suites"]) == list(SUITE_NAMES)
    assert results["quick"] is True and results["duration_s"] > 0
    s = results["suites"]
    assert all("error" not in v for v in s.values())
    # every suite measured something real, and what it could not measure is listed, not dropped
    ks = s["keyserver"]["load"]
    assert {row["system"] for row in ks} >= {"strongroom"}
    # Strongroom and OpenBao are measured in alternating rounds, and each Strongroom row carries
    # its per-round ratio to OpenBao whenever OpenBao ran
    assert all(row["rounds"] and min(row["rounds"]) > 0 for row in ks if row["system"] in ("strongroom", "openbao"))
    if any(row["system"] == "openbao" for row in ks):
        assert all(row["vs_openbao"] > 0 and row["vs_openbao_rounds"] for row in ks if row["system"] == "strongroom")
    assert {"nothing extra"} <= {row["config"] for row in s["entropy"]["rows"]}
    assert any(row["source"] == "strongroom new_key()" and row["ns_per_key"] > 0 for row in s["rng"]["keygen"])
    assert {row["system"] for row in s["fs"]["rows"]} >= {"plain", "strongroom"}
    assert [[row["rules"], row["acl_timeout"]] for row in s["acl"]["rows"]] == [list(c) for c in acl_bench.CONFIGS]
    assert any(row["tool"] == "strongroom" and row["wall_MiBps"] > 0 for row in s["bulk"]["rows"])
    for name in ("gocryptfs", "age", "gpg", "openbao", "pykmip", "haveged", "rngtest", "peer: ent"):
        measured = json.dumps(s).count(name) > 0
        listed = any(name.removeprefix("peer: ") in m for m in summary["missing"])
        assert measured or listed, f"{name} neither measured nor reported missing"
    # the report: every suite's section, every chart written and linked
    text = (out / "report.md").read_text()
    for title in bench_report.TITLES.values():
        assert f"## {title}" in text
    assert sorted(results["charts"]) == sorted(bench_report.CHARTS.values())
    for chart in results["charts"]:
        width, height = _png_size(out / chart)
        assert width > 300 and height > 200
        assert f"]({chart})" in text
