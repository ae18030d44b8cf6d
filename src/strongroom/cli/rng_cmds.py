"""`strongroom rng ...`: test randomness (more of issue 5 to come: sources, feed, status, bench)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from strongroom.cli.common import CliError, Group, emit, json_option


@click.group("rng", cls=Group)
def rng() -> None:
    """Randomness: statistics and FIPS 140-2 tests."""


@rng.command("test")
@click.argument("file", required=False, type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@click.option("--source", type=click.Choice(["getrandom"]), help="Test bytes drawn from a source instead of a file.")
@click.option("--bytes", "n", default=1 << 20, show_default=True, type=click.IntRange(2504, 1 << 30), help="How much to draw.")
@json_option
def rng_test(file: Path | None, source: str | None, n: int, as_json: bool) -> None:
    """Report ent's figures (entropy, chi-square, mean, Monte Carlo pi, serial correlation) and
    rngtest's FIPS 140-2 counts for FILE (- for stdin) or a source; exit 1 if any block fails.

    \b
    Example:
      strongroom rng test --source getrandom --bytes 10000000
      head -c 1000000 /dev/hwrng | strongroom rng test -
    """
    from strongroom.rng.fips import fips_140_2
    from strongroom.rng.stats import ent_stats

    if (file is None) == (source is None):
        raise CliError("give a FILE (or -) or --source, not both")
    if source == "getrandom":
        data = _getrandom(n)
        label = f"getrandom, {n} bytes"
    else:
        assert file is not None
        data = sys.stdin.buffer.read() if str(file) == "-" else file.read_bytes()
        label = str(file)
    if not data:
        raise CliError("no data to test")
    s = ent_stats(data)
    f = fips_140_2(data)
    out: dict[str, Any] = {"input": label, "ent": s.to_json(), "fips_140_2": f.to_json()}

    def human(_o: dict[str, Any]) -> None:
        click.echo(f"Input: {label}")
        click.echo(f"Entropy = {s.entropy:.6f} bits per byte.")
        click.echo(f"Chi square distribution for {s.bytes} samples is {s.chi_square:.2f}, and randomly")
        click.echo(f"would exceed this value {s.chi_square_p * 100:.2f} percent of the times.")
        click.echo(f"Arithmetic mean value of data bytes is {s.mean:.4f} (127.5 = random).")
        click.echo(f"Monte Carlo value for Pi is {s.monte_carlo_pi:.9f} (error {s.pi_error_percent:.2f} percent).")
        click.echo(f"Serial correlation coefficient is {s.serial_correlation:.6f} (totally uncorrelated = 0.0).")
        click.echo(
            f"FIPS 140-2: {f.blocks} blocks, {f.successes} passed, {f.failures} failed "
            f"(monobit {f.monobit}, poker {f.poker}, runs {f.runs}, long run {f.long_run}, continuous {f.continuous_run})"
        )

    emit(out, as_json, human)
    if f.failures or f.blocks == 0:
        sys.exit(1)


def _getrandom(n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = os.urandom(min(n, 1 << 20))  # getrandom(2), looping until each chunk is full
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
