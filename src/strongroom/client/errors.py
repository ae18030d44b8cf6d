"""Typed errors of the client API; each carries one readable message."""

from __future__ import annotations


class StrongroomError(Exception):
    """Base class of everything the client raises on purpose."""


class Denied(StrongroomError):
    """Authentication failed, or the policy refuses this client (HTTP 401/403)."""


class NotFound(StrongroomError):
    """No such deposit or version, or none this client may see (HTTP 404)."""


class Gone(StrongroomError):
    """The deposit expired or reached its retrieval limit (HTTP 410)."""


class Sealed(StrongroomError):
    """The server holds no master key until it is unsealed (HTTP 503 'sealed')."""


class Unavailable(StrongroomError):
    """No server could be reached, or it could not reach its database."""


class IntegrityError(Unavailable):
    """The server found the stored deposit altered and refused to answer with it."""


class InvalidRequest(StrongroomError):
    """The server refused the request as malformed, conflicting, too large or too frequent."""


class ProfileError(StrongroomError):
    """The client profile is missing or unreadable."""
