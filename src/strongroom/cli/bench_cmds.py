"""`strongroom bench`: the seed measurements beside the peers, as one report with charts."""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from strongroom.cli.common import CliError, emit, json_option

SUITE_NAMES = ("rng", "keyserver", "entropy", "bulk", "fs", "acl")


@contextlib.contextmanager
def _display(total: int) -> Iterator[tuple[Any, Any]]:
    """(on_suite, progress) callbacks: a rich progress display on a terminal, plain lines on
    stderr otherwise (CI logs).  Suites' own prints go to stderr, so stdout stays for --json."""
    if not sys.stderr.isatty():

        def on_suite(name: str, i: int, n: int) -> None:
            click.echo(f"bench [{i + 1}/{n}] {name}", err=True)

        def progress(msg: str) -> None:
            click.echo(f"bench   {msg}", err=True)

        with contextlib.redirect_stdout(sys.stderr):
            yield on_suite, progress
        return

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.fields[suite]}[/bold] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        redirect_stdout=True,
        redirect_stderr=True,
    )
    task = bar.add_task("", total=total, suite="")

    def on_suite_tty(name: str, i: int, n: int) -> None:
        bar.update(task, completed=i, suite=name, description="")

    def progress_tty(msg: str) -> None:
        bar.update(task, description=msg)

    with contextlib.redirect_stdout(sys.stderr), bar:
        yield on_suite_tty, progress_tty
        bar.update(task, completed=total, suite="done", description="")


@click.command("bench")
@click.option("--quick", is_flag=True, help="Every suite for real on small inputs (a smoke run: about 3 minutes).")
@click.option(
    "--only",
    "only",
    multiple=True,
    type=click.Choice(SUITE_NAMES),
    metavar="SUITE",
    help=f"Run only this suite (repeat): {', '.join(SUITE_NAMES)}.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-results/latest"),
    show_default=True,
    help="Directory for results.json, report.md and the PNG charts.",
)
@click.option(
    "--doc",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the project's benchmark report here (docs/BENCHMARKS.md: method, this run, the seeds' "
    "figures beside it, and OUT/pairs/*.json's before/after runs).",
)
@json_option
def bench(quick: bool, only: tuple[str, ...], out: Path, doc: Path | None, as_json: bool) -> None:
    """Reproduce the seed measurements beside the peers, on this machine, in one run.

    Suites: rng (key generation per source vs a C getrandom loop), keyserver (register, put,
    get, entropy vs OpenBao and PyKMIP), entropy (the case study's configurations: nothing,
    haveged, rng feed rdrand, both), bulk (fs encrypt vs age, gpg, openssl), fs (plain, gocryptfs,
    Strongroom, AES-NI on and off), acl (open+read with 0, 20, 200 rules).  Peers that are not
    installed are reported as missing.  Needs root for FUSE, dropping caches and feeding the
    kernel pool.  Exit 1 if a suite failed.

    \b
    Example:
      strongroom bench --quick --out /tmp/bench
      strongroom bench --only bulk --only rng
    """
    from strongroom.bench import runner

    command = shlex.join(["strongroom", "bench", *(["--quick"] if quick else []), *[a for s in only for a in ("--only", s)]])
    command += f" --out {shlex.quote(str(out))}" + (f" --doc {shlex.quote(str(doc))}" if doc else "")
    chosen = [s for s in SUITE_NAMES if not only or s in only]
    try:
        with _display(len(chosen)) as (on_suite, progress):
            results = runner.run(out, quick, list(only) or None, on_suite, progress, command=command, doc=doc)
    except OSError as e:
        raise CliError(f"cannot write the report: {e}") from None
    failed = sorted(name for name, r in results["suites"].items() if "error" in r)
    summary = {
        "out": str(out),
        "results": str(out / "results.json"),
        "report": str(out / "report.md"),
        "charts": [str(out / c) for c in results["charts"]],
        "failed": failed,
        "missing": [f"{n}: {m}" for n, r in results["suites"].items() for m in r.get("missing") or []],
        "duration_s": results["duration_s"],
    }

    def human(s: dict[str, Any]) -> None:
        click.echo(f"report: {s['report']} ({len(s['charts'])} charts, {s['duration_s']:.0f} s)")
        for m in s["missing"]:
            click.echo(f"missing: {m}")

    emit(summary, as_json, human)
    if failed:
        raise CliError(f"suite(s) failed: {', '.join(failed)} (see {out / 'report.md'})")
