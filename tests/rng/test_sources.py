"""Sources and their continuous tests: real RDRAND/RDSEED/hwrng where the machine has them,
files standing in for broken hardware (stuck, all-ones, biased), and the out-of-use/backoff cycle."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from strongroom.rng import monitor, native, sources
from strongroom.rng.monitor import SourceOutOfUse
from strongroom.rng.sources import CLAIMS, SourceError, SourceUnavailable, open_source
from strongroom.rng.stats import ent_stats

HAS_RDRAND = bool(native.lib() and native.require().sr_cpu_has_rdrand())


def _cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.parametrize("name", ["rdrand", "rdseed"])
def test_cpu_sources_match_the_cpu_flags_and_deliver_random_bytes(name: str) -> None:
    if name not in _cpu_flags():  # the helper must say "not available", and clearly
        with pytest.raises(SourceUnavailable, match="not available on this CPU"):
            open_source(name)
        return
    src = open_source(name)
    data = bytes(src.read(200_003))  # not a multiple of 8: the tail is filled too
    assert len(data) == 200_003 and data[-3:] != b"\0\0\0"
    s = ent_stats(data)
    assert s.entropy > 7.99 and abs(s.serial_correlation) < 0.01
    assert src.read(64) != src.read(64)


def test_a_cpu_source_the_kernel_switched_off_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The kernel withholding a flag (an erratum, a hypervisor) cannot be caused here at will.
    monkeypatch.setattr(sources, "kernel_cpu_flags", lambda wanted: {"fpu", "sse2"})
    why = "kernel has it switched off" if HAS_RDRAND else "not available on this CPU"
    with pytest.raises(SourceUnavailable, match=why):
        open_source("rdrand")


def test_unknown_and_missing_sources_say_why(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match="unknown source"):
        open_source("lava-lamp")
    with pytest.raises(SourceUnavailable, match="no .* on this machine"):
        open_source(f"hwrng:{tmp_path / 'nothing'}")
    with pytest.raises(SourceUnavailable, match="no client profile"):
        open_source("remote", tmp_path / "no-profile")


def test_hwrng_device_reads_exactly_and_reports_end(tmp_path: Path) -> None:
    f = tmp_path / "dev"
    f.write_bytes(os.urandom(10_000))
    src = open_source(f"hwrng:{f}")
    assert len(src.read(9_000)) == 9_000
    with pytest.raises(SourceError, match="ended"):
        src.read(2_000)


def _file_source(tmp_path: Path, data: bytes) -> monitor.TestedSource:
    f = tmp_path / "dev.bin"
    f.write_bytes(data)
    return monitor.TestedSource(open_source(f"hwrng:{f}"))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_good_source_passes_and_only_tested_bytes_come_out(tmp_path: Path) -> None:
    raw = os.urandom(400_000)
    t = _file_source(tmp_path, raw)
    out = t.read(300_000)
    assert len(out) == 300_000 and t.in_use
    st = t.status()
    assert st["bytes_tested"] >= 300_000 and st["rct_cutoff"] == 11 and st["apt_cutoff"] > 100
    assert out in raw[4:] or st["fips_failures"] > 0  # after the 4-byte start-up word, in order (less any failed blocks)


@pytest.mark.parametrize(
    "fault",
    ["stuck at zero", "all ones (AMD RDRAND, 2019)", "one byte value in half"],
)
def test_broken_hardware_is_taken_out_of_use(tmp_path: Path, fault: str) -> None:
    rng = np.random.default_rng(5)
    good = os.urandom(20_000)
    bad = {
        "stuck at zero": bytes(50_000),
        "all ones (AMD RDRAND, 2019)": b"\xff" * 50_000,
        "one byte value in half": np.where(rng.random(200_000) < 0.5, 0x3C, rng.integers(0, 256, 200_000))
        .astype(np.uint8)
        .tobytes(),
    }[fault]
    clock = Clock()
    f = tmp_path / "dev.bin"
    f.write_bytes(good + bad + os.urandom(400_000))
    t = monitor.TestedSource(open_source(f"hwrng:{f}"), clock=clock)
    t.read(15_000)  # the good start passes
    with pytest.raises(SourceOutOfUse) as e:
        for _ in range(100):
            t.read(5_000)
    assert e.value.fresh and not t.in_use
    assert "SP 800-90B" in str(e.value) or (fault == "one byte value in half" and "FIPS 140-2" in str(e.value))
    with pytest.raises(SourceOutOfUse) as again:
        t.read(10)  # waits for its retry: no bytes, not a new failure
    assert not again.value.fresh
    assert t.status()["retry_in_s"] == 1.0


def test_retry_after_backoff_needs_a_fresh_pass_and_backoff_doubles(tmp_path: Path) -> None:
    clock = Clock()
    f = tmp_path / "dev.bin"
    f.write_bytes(bytes(5_000) + bytes(5_000) + os.urandom(300_000))  # a read of 5,000 fails twice, then it heals
    t = monitor.TestedSource(open_source(f"hwrng:{f}"), clock=clock)
    with pytest.raises(SourceOutOfUse):
        t.read(100)
    assert t.retry_at == clock.now + 1
    clock.now += 1.01
    with pytest.raises(SourceOutOfUse):
        t.read(100)  # still stuck: out again, for twice as long
    assert t.retry_at == pytest.approx(clock.now + 2)
    clock.now += 0.5
    with pytest.raises(SourceOutOfUse, match="out of use for"):
        t.read(100)
    clock.now += 2
    assert len(t.read(100_000)) == 100_000 and t.in_use
    assert len(t.failures) == 2


def test_fips_failures_beyond_chance_take_a_source_out(tmp_path: Path) -> None:
    """Each byte's bits biased to 0.515 ones: SP 800-90B's tests (claim 2 bits/byte) pass it, the
    monobit test fails most blocks, so the block count rule must catch it."""
    rng = np.random.default_rng(9)
    bits = (rng.random(8 * 400_000) < 0.515).astype(np.uint8)
    t = _file_source(tmp_path, np.packbits(bits).tobytes())
    with pytest.raises(SourceOutOfUse, match="FIPS 140-2"):
        t.read(300_000)


def test_getrandom_is_not_a_raw_source() -> None:
    with pytest.raises(ValueError):
        monitor.TestedSource(open_source("getrandom"))
    assert CLAIMS["getrandom"].min_entropy is None


@pytest.mark.skipif(not Path("/dev/hwrng").exists() or os.geteuid() != 0, reason="needs /dev/hwrng and root")
def test_the_machines_hwrng_passes_a_sample() -> None:
    t = monitor.TestedSource(open_source("hwrng"))
    assert len(t.read(2_500)) == 2_500 and t.in_use
