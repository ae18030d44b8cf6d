"""Errors the logic layer raises; the API turns each into a status and a JSON body."""

from __future__ import annotations


class ApiError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(ApiError):
    status, code = 400, "bad_request"


class Invalid(ApiError):
    """A request that does not fit its route: a query parameter or body field out of its type
    or bounds, an unknown one, malformed JSON."""

    status, code = 422, "invalid_request"


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"


class Denied(ApiError):
    status, code = 403, "denied"


class ApprovalRequired(Denied):
    """A retrieval that waits for its trustees' approvals; the body carries the request's id."""

    code = "approval_required"

    def __init__(self, message: str, request_id: str = "") -> None:
        super().__init__(message)
        self.request_id = request_id


class NotFound(ApiError):
    status, code = 404, "not_found"


class Conflict(ApiError):
    status, code = 409, "conflict"


class Gone(ApiError):
    status, code = 410, "gone"


class TooLarge(ApiError):
    status, code = 413, "too_large"


class TooMany(ApiError):
    status, code = 429, "rate_limited"


class Sealed(ApiError):
    status, code = 503, "sealed"


class IntegrityFailure(ApiError):
    """Stored data failed authentication: the database was altered behind the server's back."""

    status, code = 503, "integrity_error"


class Unavailable(ApiError):
    status, code = 503, "unavailable"


class Refused(Exception):
    """Raised after a refusal was audited: the transaction commits, then ``error`` is answered."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(error.message)
        self.error = error


class SchemaTooNew(Exception):
    """The database was made or upgraded by a newer release than this one."""


class StorageUnavailable(Exception):
    """The database cannot be reached or refused the operation for a transient reason."""
