"""Typed errors of the client API; each carries one readable message."""

from __future__ import annotations


class StrongroomError(Exception):
    """Base class of everything the client raises on purpose."""


class Denied(StrongroomError):
    """Authentication failed, or the policy refuses this client (HTTP 401/403)."""


class ApprovalRequired(Denied):
    """The deposit's policy wants its trustees' approval first (HTTP 403 approval_required);
    ``request_id`` names the pending request they approve (`strongroom approve ID`)."""

    def __init__(self, message: str, request_id: str) -> None:
        super().__init__(message)
        self.request_id = request_id


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
