"""The bulk suite's terminal driver (age -p reads its passphrase from a terminal only)."""

from __future__ import annotations

import os
import sys

import pytest

from strongroom.bench import bulk

pytestmark = pytest.mark.unit  # the fast tier: no root, FUSE, PostgreSQL or server process


def test_tty_driver_answers_passphrase_prompts() -> None:
    script = (
        "import getpass; a = getpass.getpass('Enter passphrase: '); b = getpass.getpass('Confirm passphrase: '); "
        "raise SystemExit(0 if a == b == %r else 3)"
    )
    rc, _cpu = bulk._run_with_tty([sys.executable, "-c", script % bulk.PASSPHRASE], dict(os.environ))
    assert rc == 0


def test_tty_driver_reports_a_command_that_cannot_start() -> None:
    # the forked child must exit (127), never fall back into the caller's code
    rc, _cpu = bulk._run_with_tty(["/nonexistent/strongroom-bench-peer"], dict(os.environ))
    assert rc == 127
