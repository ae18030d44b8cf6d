"""`strongroom rng ...`: test sources, report their state, feed the kernel pool, benchmark."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from strongroom.cli.common import CliError, Group, emit, json_option, profile_option, progress_bar
from strongroom.crypto.hygiene import harden_process
from strongroom.daemon import FORMAT, DetachError, log_handler, run_detached

SOURCE_HELP = "getrandom, rdrand, rdseed, hwrng (or hwrng:PATH for another device, file or pipe), remote"
PIECE = 1 << 20
PROBE_SECONDS = 2.0


@click.group("rng", cls=Group)
def rng() -> None:
    """Randomness: sources, health tests, statistics, feeding the kernel pool."""


def _open(spec: str, profile: Path | None) -> Any:
    from strongroom.rng.sources import SourceUnavailable, open_source

    try:
        return open_source(spec, profile)
    except SourceUnavailable as e:
        raise CliError(str(e)) from None


@rng.command("test")
@click.argument("file", required=False, type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@click.option("--source", metavar="S", help=f"Test bytes read from a source instead of a file: {SOURCE_HELP}.")
@click.option(
    "--bytes", "n", default=1 << 20, show_default=True, type=click.IntRange(2504, 1 << 34), help="How much to read from a source."
)
@profile_option
@json_option
def rng_test(
    file: Path | None, source: str | None, n: int, profile: Path | None, servers: tuple[str, ...], as_json: bool
) -> None:
    """Report ent's figures (entropy, chi-square, mean, Monte Carlo pi, serial correlation) and
    rngtest's FIPS 140-2 counts for FILE (- for stdin) or the raw output of a source; exit 1 if
    more blocks fail than chance explains (p below 0.001: perfect data fails ~1 block in 1,250).
    Raw means untested: this is how to look at a source, not how it is used.

    \b
    Example:
      strongroom rng test --source rdrand --bytes 100000000
      head -c 1000000 /dev/hwrng | strongroom rng test -
    """
    from strongroom.rng.fips import CHANCE_FAILURE_RATE, FALSE_ALARM_RATE, FipsStream, chance_p_value
    from strongroom.rng.sources import SourceError
    from strongroom.rng.stats import EntAccumulator

    if (file is None) == (source is None):
        raise CliError("give a FILE (or -) or --source, not both")
    ent, fips = EntAccumulator(), FipsStream()
    if source is not None:
        src = _open(source, profile)
        label = f"{src.name}, {n} bytes"
        with progress_bar(f"reading {src.name}", n, minimum=16 * PIECE) as advance:
            left = n
            try:
                while left:
                    piece = src.read(min(PIECE, left))
                    ent.update(piece)
                    fips.feed(piece, keep=False)
                    left -= len(piece)
                    advance(len(piece))
            except SourceError as e:
                raise CliError(str(e)) from None
            finally:
                src.close()
    else:
        label = str(file)
        stream = sys.stdin.buffer if str(file) == "-" else open(str(file), "rb")  # noqa: SIM115
        with stream:
            while piece := stream.read(PIECE):
                ent.update(piece)
                fips.feed(piece, keep=False)
    if ent.bytes == 0:
        raise CliError("no data to test")
    if ent.bytes < 4:
        raise CliError("too little data to test: need at least 4 bytes")
    s, f = ent.result(), fips.result()
    expected = f.blocks * CHANCE_FAILURE_RATE
    p_value = chance_p_value(f.blocks, f.failures)
    random_enough = f.blocks > 0 and p_value >= FALSE_ALARM_RATE
    verdict = {
        "expected_failures": round(expected, 3),
        "chance_failure_rate": CHANCE_FAILURE_RATE,
        "p_value": p_value,
        "false_alarm_rate": FALSE_ALARM_RATE,
        "random": random_enough,
    }
    out: dict[str, Any] = {"input": label, "ent": s.to_json(), "fips_140_2": {**f.to_json(), **verdict}}

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
        click.echo(
            f"Chance alone fails {expected:.2f} of {f.blocks} blocks of random data; {f.failures} or more "
            f"fail with probability {p_value:.3g}: "
            + ("consistent with random data." if random_enough else f"unlikely to be random (below {FALSE_ALARM_RATE}).")
        )

    emit(out, as_json, human)
    if not random_enough:
        sys.exit(1)


@rng.command("status")
@click.option(
    "--status-file",
    default="/run/strongroom/rng-feed.json",
    show_default=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A running feeder's state file.",
)
@click.option(
    "--probe-bytes",
    default=250_000,
    show_default=True,
    type=click.IntRange(0, 1 << 26),
    help="Bytes read through each raw source's health tests (0: do not read).",
)
@profile_option
@json_option
def rng_status(status_file: Path, probe_bytes: int, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Show each source (available or why not, its min-entropy claim, and whether a sample passes
    its health tests), the kernel pool, and a running feeder.

    \b
    Example:
      strongroom rng status
      strongroom rng status --json --probe-bytes 0
    """
    from strongroom.rng import feeder, pool
    from strongroom.rng.monitor import SourceOutOfUse, TestedSource
    from strongroom.rng.sources import CLAIMS, NAMES, SourceUnavailable, open_source

    sources = []
    for name in NAMES:
        claim = CLAIMS[name]
        row: dict[str, Any] = {"source": name, "kind": claim.kind, "min_entropy_claim": claim.min_entropy}
        try:
            src = open_source(name, profile)
        except SourceUnavailable as e:
            row.update(available=False, reason=str(e))
            sources.append(row)
            continue
        row["available"] = True
        device = getattr(src, "device", None)
        if device:
            row["device"] = device
        if claim.min_entropy is None:
            row["health"] = "not tested: conditioned by the kernel"
        elif probe_bytes:
            tested = TestedSource(src)
            deadline = time.monotonic() + PROBE_SECONDS  # slow sources (hwrng) get a sample, not a wait
            try:
                while tested.health.samples < probe_bytes and time.monotonic() < deadline:
                    tested.read(min(src.read_size, probe_bytes))
                row["health"] = "passed"
            except SourceOutOfUse as e:
                row["health"] = f"FAILED: {e}"
            row["tests"] = tested.status()
        src.close()
        sources.append(row)
    st = pool.state()
    running = feeder.read_status(status_file)
    others = _other_feeders()
    out = {"sources": sources, "pool": st.to_json(), "feeder": running, "other_feeders": others}

    def human(_o: dict[str, Any]) -> None:
        for row in sources:
            claim = "" if row["min_entropy_claim"] is None else f", claim {row['min_entropy_claim']:g} bits/byte"
            if not row["available"]:
                click.echo(f"{row['source']:<10} unavailable: {row['reason']}")
            else:
                dev = f" ({row['device']})" if row.get("device") else ""
                click.echo(f"{row['source']:<10} available{dev}{claim}; health: {row.get('health', 'not probed')}")
        mode = "watermark (kernel accounts entropy)" if st.accounting else "schedule (kernel >= 5.18 reads full once seeded)"
        click.echo(f"kernel {st.kernel}: entropy_avail {st.entropy_avail} of {st.poolsize} bits; feeding by {mode}")
        if running:
            click.echo(
                f"feeder pid {running['pid']}: {running['bytes_added']} bytes added, {running['bits_credited']} bits credited"
            )
        else:
            click.echo("no strongroom feeder running")
        if others:
            click.echo("other feeders running: " + ", ".join(others))

    emit(out, as_json, human)


def _other_feeders() -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                comm = (proc / "comm").read_text().strip()
            except OSError:
                continue
            if comm in ("rngd", "haveged", "jitterentropy-r"):
                found.append(f"{comm} (pid {proc.name})")
    return sorted(found)


@rng.command("feed")
@click.option(
    "--source",
    "source_specs",
    multiple=True,
    required=True,
    metavar="S",
    help=f"A source, in order of preference (repeat): {SOURCE_HELP}.",
)
@click.option("--device", default="/dev/random", show_default=True, help="The random device to add to.")
@click.option(
    "--watermark",
    type=click.IntRange(1),
    help="Kernels before 5.18: add when entropy_avail is below this many bits (default 3/4 of the pool).",
)
@click.option(
    "--interval",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0.01),
    help="Seconds between checks (before 5.18) or additions (5.18 and later).",
)
@click.option(
    "--chunk",
    default=64,
    show_default=True,
    type=click.IntRange(1, 1 << 16),
    help="Bytes per scheduled addition (5.18 and later).",
)
@click.option("--max-rate", default=4096, show_default=True, type=click.IntRange(1), help="Bytes per second, at most.")
@click.option(
    "--give-up-after",
    default=5,
    show_default=True,
    type=click.IntRange(1),
    help="Failures in a row before a source is dropped for good.",
)
@click.option("--once", is_flag=True, help="Add once and exit (for scripts and checks).")
@click.option("--foreground", is_flag=True, help="Stay in the foreground, logging to stderr (as under systemd).")
@click.option(
    "--status-file",
    default="/run/strongroom/rng-feed.json",
    show_default=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where `rng status` finds the feeder's state.",
)
@click.option(
    "--log-file", type=click.Path(dir_okay=False, path_type=Path), help="In the background, log here (default: syslog)."
)
@profile_option
def rng_feed(
    source_specs: tuple[str, ...],
    device: str,
    watermark: int | None,
    interval: float,
    chunk: int,
    max_rate: int,
    give_up_after: int,
    once: bool,
    foreground: bool,
    status_file: Path,
    log_file: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
) -> None:
    """Add health-tested bytes from sources to the kernel pool (the rngd role), crediting each at
    its source's min-entropy claim.  Needs root.  Exits non-zero when no healthy source remains.

    \b
    Example:
      strongroom rng feed --source rdseed --source rdrand --foreground
      strongroom rng feed --source hwrng --once
    """
    from strongroom.rng import feeder, pool
    from strongroom.rng.monitor import TestedSource

    if os.geteuid() != 0:
        raise CliError("adding entropy to the kernel pool needs root (CAP_SYS_ADMIN)")
    from strongroom.rng.sources import SourceUnavailable, open_source

    tested = []
    for spec in source_specs:
        try:
            src = open_source(spec, profile)
        except SourceUnavailable as e:
            click.echo(f"strongroom: warning: {e} (skipped)", err=True)  # rngd's way: use what this host has
            continue
        if src.claim.min_entropy is None:
            raise CliError(f"{spec} is the kernel's own output: feeding it back adds nothing")
        tested.append(TestedSource(src))
    if not tested:
        raise CliError("no source available: " + ", ".join(source_specs), code=3)
    try:
        writer = pool.PoolWriter(device)
    except pool.PoolError as e:
        raise CliError(str(e)) from None
    st = pool.state()
    policy = feeder.FeedPolicy(
        watermark=watermark or max(1, st.poolsize * 3 // 4),
        interval=interval,
        chunk=chunk,
        max_rate=max_rate,
        give_up_after=give_up_after,
    )
    feed = feeder.Feeder(tested, writer, policy)  # the status file names the process that keeps feeding
    feed_log = logging.getLogger("strongroom.rng.feed")
    feed_log.addHandler(logging.NullHandler())  # until logging is set up: the error line says it all
    try:
        added = feed.step()  # the first round in the foreground: errors reach the caller
        while once and not added and not feed.given_up and not pool.accounting():
            feed.stopping.wait(0.2)  # a source out of use for its first retry
            added = feed.step()
    except feeder.NoHealthySource as e:
        raise CliError(str(e), code=3) from None
    except pool.PoolError as e:
        raise CliError(str(e)) from None
    if once:
        mode = "watermark" if st.accounting else "schedule"
        click.echo(f"added {feed.bytes_added} bytes, credited {feed.bits_credited} bits ({mode} mode)")
        if feed.bytes_added == 0 and not st.accounting:
            raise CliError("no source delivered healthy bytes", code=3)
        return

    def serve(ready: Callable[[], None]) -> None:
        feed.status_file = status_file
        for missing in harden_process():  # it holds the sources' output on its way to the pool
            feed_log.warning("%s", missing)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: feed.stop())
        mode = "watermark" if st.accounting else "schedule"
        feed_log.info("feeding %s from %s (%s mode)", device, ", ".join(s.name for s in tested), mode)
        ready()
        try:
            feed.run()
        except feeder.NoHealthySource as e:
            feed_log.error("%s", e)
            raise CliError(str(e), code=3) from None
        except pool.PoolError as e:
            feed_log.error("%s", e)
            raise CliError(str(e)) from None
        finally:
            status_file.unlink(missing_ok=True)

    if foreground:
        logging.basicConfig(level=logging.INFO, format=FORMAT)
        serve(lambda: None)
        return
    try:
        fallback = Path("/var/log/strongroom-rng-feed.log")
        run_detached(serve, lambda: log_handler(log_file, fallback), chdir_root=True)
    except DetachError as e:
        raise CliError(str(e)) from None


@rng.command("bench")
@click.option("--quick", is_flag=True, help="100,000 keys and 1 s budgets instead of 1,000,000 and 10 s.")
@click.option("--no-remote", is_flag=True, help="Skip the remote source (it starts a local server).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Also write the results as JSON here.")
@json_option
def rng_bench(quick: bool, no_remote: bool, out: Path | None, as_json: bool) -> None:
    """Measure 32-byte key generation per source (ns per key) beside a C getrandom(2) loop, bulk
    MB/s, and the speed of the health and statistics tests.

    \b
    Example:
      strongroom rng bench --quick
      strongroom rng bench --out bench-results/rng.json
    """
    import json

    from strongroom.bench import rng as rng_bench_mod

    report = rng_bench_mod.run(quick, remote=not no_remote, progress=lambda m: click.echo(f"... {m}", err=True))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
    emit(report, as_json, lambda r: click.echo(rng_bench_mod.table(r)))
