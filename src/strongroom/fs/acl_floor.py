"""This host's memory of the newest access-rules serial it has seen for each volume.

The volume itself can tell a missing, edited or older rules file (their MAC, and the serial
recorded in the config under its own MAC), but not the config and the rules put back together
as an earlier, valid pair: nothing on the volume's disk remembers the newer one.  This host
does: every serial it writes (`acl add|rm|mode|...`) or enforces is kept, root-only, outside the
volume, and a volume whose rules are older than that is refused here.  A host that never saw the
newer rules (the disk moved to another machine), or whose record was deleted, cannot tell.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from strongroom.fs import durable, sidecar
from strongroom.fs.names import b64u

log = logging.getLogger("strongroom.acl")
DEFAULT_DIR = "/var/lib/strongroom/host"
RECORD_MAX = 32  # bytes: a decimal serial


def _record(volume_id: bytes) -> Path:
    # STRONGROOM_STATE_DIR moves the host's state (tests keep it in a temporary directory)
    return Path(os.environ.get("STRONGROOM_STATE_DIR", DEFAULT_DIR)) / "acl-serials" / b64u(volume_id)


def seen(volume_id: bytes) -> int | None:
    """The newest serial this host has recorded for the volume, None if none."""
    path = _record(volume_id)
    try:
        raw = sidecar.read_bounded(path, RECORD_MAX)
    except OSError as e:
        log.warning("%s: this host's record of the volume's rules is unreadable (%s)", path, e.strerror)
        return None
    if raw is None:
        return None
    text = raw.decode("ascii", "replace").strip()
    if not (text.isascii() and text.isdigit()):
        log.warning("%s: this host's record of the volume's rules is corrupt", path)
        return None
    return int(text)


def remember(volume_id: bytes, serial: int) -> None:
    """Record ``serial`` unless a newer one is recorded; a host that cannot keep it only logs."""
    known = seen(volume_id)
    if known is not None and known >= serial:
        return
    path = _record(volume_id)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        durable.replace_file(path, f"{serial}\n".encode(), 0o600)
    except OSError as e:
        log.warning("%s: cannot record the volume's rules serial (%s): a rollback will not be noticed here", path, e.strerror)
