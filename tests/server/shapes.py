"""The deposit API's error shape, as its tests check it (docs/API.md, Errors)."""

from __future__ import annotations

from typing import Any


def deposit_error_keys(status: int, body: Any) -> bool:
    """``{"error", "message"}``; a path no route serves also carries Vault's ``errors``."""
    if not isinstance(body, dict):
        return False
    extra = {"errors"} if status == 404 and body.get("message") == "no such route" else set()
    if status == 403 and body.get("error") == "approval_required":
        extra = {"request_id"}
    return set(body) == {"error", "message"} | extra
