"""systemd's readiness protocol (sd_notify(3)): one datagram to $NOTIFY_SOCKET.  Outside
systemd (no NOTIFY_SOCKET) nothing is sent; a socket that fails is logged, never fatal."""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("strongroom")


def notify(*fields: str) -> bool:
    """Send ``fields`` (e.g. "READY=1", "STATUS=...") to the service manager; True if sent."""
    path = os.environ.get("NOTIFY_SOCKET", "")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path  # "@": Linux's abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(address)
            s.sendall("\n".join(fields).encode())
    except OSError as e:
        log.warning("could not notify the service manager (%s): %s", path, e.strerror or type(e).__name__)
        return False
    return True


def ready(status: str) -> bool:
    return notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")
