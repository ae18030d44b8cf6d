"""docs/BENCHMARKS.md is generated (report.document): method, the run's facts, the seeds' figures
beside the run's own (computed from results.json, so a change in the numbers shows), every
suite's tables, and the stored side-by-side runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from strongroom.bench import pairs, report

pytestmark = pytest.mark.unit
RESULTS = Path(__file__).resolve().parents[2] / "docs" / "bench" / "results.json"


def test_the_document_has_every_part_and_reads_the_numbers(tmp_path: Path) -> None:
    results = json.loads(RESULTS.read_text())
    out = tmp_path / "bench"
    out.mkdir()
    pairs.save(
        out / "pairs" / "fs_small.json",
        "fs_small",
        3,
        ["/somewhere/src"],
        [{"base": "/somewhere/src", "phase": "tar x", "time": 1.04, "daemon CPU": 0.97}],
    )
    text = report.document(results, [], out, tmp_path / "BENCHMARKS.md")
    side = "## Side by side in one run: builds before and after, and the Vault-compatible API"
    for heading in ("## Method", "## This run", "## Against the seed documents", side):
        assert heading in text
    assert results["command"] in text
    c_loop = next(r for r in results["suites"]["rng"]["keygen"] if r["source"] == "C getrandom(2)")
    assert f"takes {c_loop['ns_per_key'] / 1000:.2f} µs" in text
    assert "| tar x | 1.04 | 0.97 |" in text
    # the reading follows the numbers: another run says something else
    other = copy.deepcopy(results)
    for r in other["suites"]["fs"]["rows"]:
        if r["system"] == "strongroom" and r["aesni"]:
            r["copy_s"] *= 2
    assert report.document(other, [], out, tmp_path / "BENCHMARKS.md") != text


def test_a_suite_that_did_not_run_leaves_its_reading_out(tmp_path: Path) -> None:
    results = json.loads(RESULTS.read_text())
    del results["suites"]["entropy"]
    text = report.document(results, [], tmp_path, tmp_path / "BENCHMARKS.md")
    assert "Gazzang" not in text and "AES-NI disk-encryption" in text


def test_redrawing_from_a_missing_or_broken_results_file_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert report.main([str(tmp_path / "missing.json")]) == 1
    (tmp_path / "broken.json").write_text("{}")
    assert report.main([str(tmp_path / "broken.json"), "--doc", str(tmp_path / "B.md")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("report: cannot redraw from") for line in err)
    assert not (tmp_path / "B.md").exists()


def test_the_vault_verdict_names_what_missed() -> None:
    from strongroom.bench.report import _vault_verdict

    def row(phase: str, rate: float, p99: float = 5.0) -> dict[str, object]:
        return {"phase": phase, "rate vs OpenBao": rate, "Strongroom p99 ms": p99}

    met = _vault_verdict({"rows": [row("kv read, 16 clients", 1.1), row("kv write, 16 clients", 4.0)]})
    assert "rate: met" in met and "10 ms: met (5.0 ms)" in met
    missed = _vault_verdict({"rows": [row("kv read, 16 clients", 0.9, 12.0), row("kv write, 16 clients", 4.0)]})
    assert "MISSED (kv read, 16 clients)" in missed and "10 ms: MISSED (12.0 ms)" in missed


def test_the_database_verdict_compares_with_gocryptfs_only() -> None:
    from strongroom.bench.report import _db_verdict

    def row(base: str, phase: str, ratio: float) -> dict[str, object]:
        return {"base": base, "phase": phase, "Strongroom / it": ratio}

    latency = row("gocryptfs", "8 KiB write+fdatasync us", 0.9)
    met = _db_verdict({"rows": [row("gocryptfs", "pgbench tps", 1.02), row("plain", "pgbench tps", 0.5), latency]})
    assert met.endswith("met.")  # a latency below gocryptfs's is no missed rate
    missed = _db_verdict({"rows": [row("gocryptfs", "pgbench tps", 0.83), row("gocryptfs", "fio read iops", 1.1)]})
    assert "MISSED (pgbench tps 0.83x)" in missed and "fio" not in missed
