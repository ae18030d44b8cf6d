"""Running long work detached from the terminal: `fs mount` and `rng feed` without --foreground.

``run_detached`` forks; the child starts a session, lets go of the terminal, logs where it is
told, and runs the work, which calls ``ready()`` once it serves.  The parent returns then, or
raises ``DetachError`` with the child's own error message if the work failed before that, so the
caller's terminal sees why it did not start.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
from collections.abc import Callable
from pathlib import Path

FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
_READY = b"\0ready"


class DetachError(Exception):
    """The detached work ended before it was ready; the message is its own."""


def log_handler(log_file: Path | None, fallback: Path | None = None) -> logging.Handler:
    """A file given, else syslog, else ``fallback`` (a file), else nowhere."""
    if log_file is not None:
        return logging.FileHandler(log_file)
    if Path("/dev/log").exists():
        return logging.handlers.SysLogHandler("/dev/log")
    if fallback is not None:
        return logging.FileHandler(fallback)
    return logging.NullHandler()


def run_detached(
    work: Callable[[Callable[[], None]], None], log: Callable[[], logging.Handler], chdir_root: bool = False
) -> None:
    """Run ``work(ready)`` in a detached child; return in the parent once it called ``ready``.
    ``chdir_root``: the child leaves its working directory (only when no relative path is used
    later), so that it does not keep a filesystem busy."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as r:
            status = r.read()
        if status == _READY:
            return
        os.waitpid(pid, 0)
        raise DetachError(status.decode(errors="replace") or "the daemon exited before it was ready")
    os.close(read_end)
    code = 0
    try:
        os.setsid()
        if chdir_root:
            os.chdir("/")
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        handler = log()
        handler.setFormatter(logging.Formatter(FORMAT))
        logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
        reported = False

        def ready() -> None:
            nonlocal reported
            os.write(write_end, _READY)
            os.close(write_end)
            reported = True

        try:
            work(ready)
        except BaseException as e:  # noqa: BLE001 - said through the pipe when still possible, then logged
            code = 1
            if not reported:
                os.write(write_end, (str(e) or type(e).__name__).encode())
            logging.getLogger("strongroom").error("%s", str(e) or type(e).__name__)
    finally:
        os._exit(code)
