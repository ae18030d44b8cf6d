"""The server raises its own open-descriptor limit at start (issue 37, point 11): each connection
is a descriptor, and the common soft limit of 1,024 let 1,100 idle TCP connections stop it."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def _low_soft_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 4096))


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    code = (
        "import resource\nfrom strongroom.server.run import raise_fd_limit\n"
        "print(raise_fd_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, preexec_fn=_low_soft_limit)
    assert out.stdout.split() == ["4096", "4096", "4096"], out


def test_serve_raises_it_before_anything_else() -> None:
    import inspect

    from strongroom.server import run

    body = inspect.getsource(run.serve)
    assert body.index("raise_fd_limit()") < body.index("bind(listen)")
