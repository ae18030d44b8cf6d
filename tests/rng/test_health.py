"""SP 800-90B continuous health tests: cutoffs from the standard, failures caught, good data passes."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from strongroom.rng.health import HealthTests, apt_cutoff, rct_cutoff

pytestmark = pytest.mark.unit  # the fast tier: no root, FUSE, PostgreSQL or server process


def test_repetition_cutoff_matches_sp800_90b() -> None:
    # SP 800-90B §4.4.1's example: H = 2 and alpha = 2^-20 give C = 11.
    assert rct_cutoff(2) == 11
    assert rct_cutoff(8) == 4 and rct_cutoff(1) == 21
    with pytest.raises(ValueError):
        rct_cutoff(0)


@pytest.mark.parametrize("h", [1, 2, 4, 8])
def test_proportion_cutoff_is_the_binomial_quantile(h: int) -> None:
    """C - 1 is the smallest k with P(X <= k) >= 1 - 2^-20, X ~ Binomial(512, 2^-h): checked exactly
    with integers, independently of the floating-point search in the code."""
    n, m = 512, 2**h

    def cdf_times_mn(k: int) -> int:  # P(X <= k) * m^n, exact
        return sum(math.comb(n, i) * (m - 1) ** (n - i) for i in range(k + 1))

    c = apt_cutoff(h)
    total = m**n
    assert cdf_times_mn(c - 1) * 2**20 >= total * (2**20 - 1)
    assert cdf_times_mn(c - 2) * 2**20 < total * (2**20 - 1)


ENGINES = pytest.mark.parametrize("engine", ["c", "numpy"])


@ENGINES
def test_random_data_passes_in_pieces(engine: str) -> None:
    h = HealthTests(min_entropy=4, engine=engine)
    for _ in range(50):
        assert h.feed(os.urandom(10_000))
    assert h.healthy and h.samples == 500_000


@ENGINES
def test_stuck_source_fails_repetition_count_across_calls(engine: str) -> None:
    h = HealthTests(min_entropy=4, engine=engine)  # C = 6
    assert h.feed(os.urandom(1000) + b"\x07" * 3)
    assert not h.feed(b"\x07" * 3 + os.urandom(100))  # 6 in a row only across the two calls
    assert h.rct_failures == 1


@ENGINES
def test_biased_source_fails_adaptive_proportion(engine: str) -> None:
    rng = np.random.default_rng(7)
    biased = np.where(rng.random(64 * 512) < 0.5, 0xAA, rng.integers(0, 256, 64 * 512)).astype(np.uint8)
    h = HealthTests(min_entropy=4, engine=engine)  # claims 4 bits/byte; this source has about 1
    h.feed(biased.tobytes())
    assert h.apt_failures > 0


def test_engines_count_the_same_failures_in_any_pieces() -> None:
    """The C and numpy engines agree on a stream with stuck runs and biased windows, whatever the
    piece boundaries (state carries across calls in both)."""
    rng = np.random.default_rng(11)
    data = bytearray(rng.integers(0, 256, 200_000, dtype=np.uint8).tobytes())
    for at in range(1000, 200_000, 7919):  # stuck runs of 3..12, some across piece boundaries
        data[at : at + 3 + at % 10] = bytes([at % 256]) * (3 + at % 10)
    data[50_000:51_024] = rng.choice([0x55, 0x11], 1024).astype(np.uint8).tobytes()  # two biased windows
    c, ref = HealthTests(4, engine="c"), HealthTests(4, engine="numpy")
    cuts = sorted(rng.integers(0, len(data), 40))
    for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
        c.feed(bytes(data[a:b]))
        ref.feed(bytes(data[a:b]))
    assert (c.rct_failures, c.apt_failures) == (ref.rct_failures, ref.apt_failures)
    assert c.rct_failures > 5 and c.apt_failures >= 2
