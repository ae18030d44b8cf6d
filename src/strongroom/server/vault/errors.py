"""Vault's error answers: a status and ``{"errors": [...]}`` (an empty list for a plain 404)."""

from __future__ import annotations

from strongroom.server.errors import ApiError, BadRequest, Denied, NotFound


class PermissionDenied(Denied):
    """A missing, unknown, expired or used-up token, or one whose policies do not allow the call:
    Vault answers all of them alike, so a caller learns nothing about which."""

    def __init__(self) -> None:
        super().__init__("permission denied")


class Missing(NotFound):
    """Vault's bare 404: no message."""

    def __init__(self) -> None:
        super().__init__("")


class Invalid(BadRequest):
    pass


def errors_of(e: ApiError) -> list[str]:
    return [e.message] if e.message else []
