"""Mounting a volume with libfuse3 (through mfusepy), tuned the way ../shared/baselines.md
measured, minus the writeback cache (see init_with_config): 1 s entry timeouts, 1 MiB requests,
lower inode numbers."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strongroom.fs.fuse_ops import VolumeOps
from strongroom.fs.keys import VolumeKeys

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")  # mfusepy would take libfuse2 if it were installed

FUSE_CAP_WRITEBACK_CACHE = 1 << 16
MAX_WRITE = 1 << 20
TIMEOUT = 1.0


class MountError(Exception):
    pass


def mounted_at(mountpoint: Path) -> str | None:
    """The source of what is mounted at ``mountpoint``, if anything."""
    target = os.path.realpath(mountpoint)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        mp = fields[4].encode().decode("unicode_escape")
        if mp == target:
            sep = fields.index("-")
            return fields[sep + 2]
    return None


def volume_mounted(volume: Path) -> str | None:
    """Where the volume is mounted already, if it is."""
    name = f"strongroom:{os.path.realpath(volume)}"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        if fields[sep + 2].encode().decode("unicode_escape") == name:
            return fields[4].encode().decode("unicode_escape")
    return None


class _Ops(VolumeOps):
    on_mounted: Callable[[], None] | None = None

    def init_with_config(self, conn: Any, config: Any) -> None:
        if conn is not None:
            # No writeback cache: with it the kernel keeps its own idea of a file's size and ignores
            # ours, which breaks hard links under libfuse's path-based API (each name is its own
            # kernel inode).  The low-level API (one inode per file) would allow both.
            conn.want &= ~FUSE_CAP_WRITEBACK_CACHE
            conn.max_write = MAX_WRITE
            conn.max_readahead = MAX_WRITE  # 1 MiB read requests too: fewer round trips
        if config is not None:
            config.entry_timeout = TIMEOUT
            # Attributes are not cached: libfuse's path-based API gives each hard-link name its own
            # kernel inode, so a size cached under one name would go stale when another name writes.
            config.attr_timeout = 0.0
            config.negative_timeout = TIMEOUT
            config.use_ino = 1
        if self.on_mounted is not None:
            self.on_mounted()


def run(
    volume: Path,
    mountpoint: Path,
    keys: VolumeKeys,
    long_name_max: int,
    allow_other: bool = False,
    read_only: bool = False,
    on_mounted: Callable[[], None] | None = None,
) -> None:
    """Serve the mount in this process until it is unmounted or SIGTERM/SIGINT arrives."""
    import mfusepy

    if not mountpoint.is_dir():
        raise MountError(f"{mountpoint} is not a directory")
    if (where := volume_mounted(volume)) is not None:
        raise MountError(f"{volume} is already mounted at {where}")
    if mounted_at(mountpoint) is not None:
        raise MountError(f"something is already mounted at {mountpoint}")
    ops = _Ops(str(volume), keys, long_name_max, read_only)
    ops.on_mounted = on_mounted
    options: dict[str, Any] = {
        "fsname": f"strongroom:{os.path.realpath(volume)}",
        "subtype": "strongroom",
        "default_permissions": True,  # the kernel checks modes and owners: the daemon runs as root
    }
    if allow_other:
        options["allow_other"] = True
    if read_only:
        options["ro"] = True
    logging.getLogger("mfusepy").setLevel(logging.WARNING)
    mfusepy.FUSE(ops, str(mountpoint), foreground=True, nothreads=False, **options)


def umount(mountpoint: Path) -> None:
    if mounted_at(mountpoint) is None:
        raise MountError(f"nothing is mounted at {mountpoint}")
    r = subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True, text=True)
    if r.returncode != 0:
        raise MountError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"cannot unmount {mountpoint}")
