"""Who is using a volume's lower directory: a mount's daemon, or an offline tool that rewrites it
(rotate, reencrypt).  Each holds an exclusive flock(2) on the volume's root directory for as long
as it runs, so a tool never rewrites a volume that is mounted, however the volume was named (a
bind mount, a symlink, a relative path): the lock is on the directory's inode, not on a path,
and the kernel drops it when the holder exits, even on SIGKILL.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class VolumeBusy(Exception):
    """Someone else holds the volume."""


def hold(volume: Path) -> int:
    """Take the volume: the descriptor that holds it, to be kept open until done; VolumeBusy if a
    mount or another tool has it."""
    fd = os.open(volume, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise VolumeBusy(
            f"{volume} is in use (mounted, or another strongroom command is working on it): unmount it or let that finish"
        ) from None
    return fd
