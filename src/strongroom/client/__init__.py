"""The Python client of the key trustee server, used by the CLI and the filesystem."""

from strongroom.client.client import Client
from strongroom.client.errors import (
    Denied,
    Gone,
    InvalidRequest,
    NotFound,
    Sealed,
    StrongroomError,
    Unavailable,
)

__all__ = ["Client", "Denied", "Gone", "InvalidRequest", "NotFound", "Sealed", "StrongroomError", "Unavailable"]
