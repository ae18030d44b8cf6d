"""The Python client of the key trustee server, used by the CLI and the filesystem."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strongroom.client.errors import (
    ApprovalRequired,
    Denied,
    Gone,
    InvalidRequest,
    NotFound,
    Sealed,
    StrongroomError,
    Unavailable,
)

if TYPE_CHECKING:
    from strongroom.client.client import Client

__all__ = [
    "ApprovalRequired",
    "Client",
    "Denied",
    "Gone",
    "InvalidRequest",
    "NotFound",
    "Sealed",
    "StrongroomError",
    "Unavailable",
]


def __getattr__(name: str) -> Any:
    # Client pulls in TLS, HTTP and signing: commands that never talk to a server do not pay for it.
    if name == "Client":
        from strongroom.client.client import Client

        return Client
    raise AttributeError(name)
