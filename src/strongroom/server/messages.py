"""The messages a worker sends the writer process (server/writer.py) and the replies it gets.

Every request the API serves becomes one of these (built by front.py or vault/http.py), runs in
the writer as one action of a group commit (actions.py), and comes back as a ``Reply``.  Frames
carry them as ``marshal`` data: a message is ``(TAG, class name, fields)``, its fields plain
values or messages; both ends are this package, so the class names are a closed list
(``MESSAGES``) and anything else is refused.
"""

from __future__ import annotations

import dataclasses
import marshal
import struct
from dataclasses import dataclass
from typing import Any

from strongroom.server import errors

TAG = "strongroom.message"
MESSAGES: dict[str, type[Any]] = {}

Checked = tuple[str, str, int]  # a request whose signature held: (client id, nonce, timestamp)


def message(cls: type[Any]) -> type[Any]:
    """Register a frozen dataclass as a message that may cross between processes."""
    MESSAGES[cls.__name__] = cls
    return cls


def encode(value: Any) -> Any:
    """A message (and the messages in its fields) as marshal-able tuples; plain values as they are."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if type(value).__name__ not in MESSAGES:
            raise TypeError(f"{type(value).__name__} is not a registered message")
        return (TAG, type(value).__name__, tuple(encode(getattr(value, f.name)) for f in dataclasses.fields(value)))
    return value


def decode(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 3 and value[0] == TAG:
        cls = MESSAGES.get(value[1])
        if cls is None or not isinstance(value[2], tuple):
            raise ValueError("not a message this server sends")
        return cls(*(decode(v) for v in value[2]))
    return value


# -- envelopes ---------------------------------------------------------------------------------
@message
@dataclass(frozen=True)
class Call:
    """One request for the writer: ``checked`` is None for a request that carries no signature
    (a registration, a Vault token's request)."""

    rid: int
    raw_path: str
    checked: Checked | None
    body: Any


@message
@dataclass(frozen=True)
class Reply:
    rid: int
    ok: bool
    result: Any  # the action's result, or a Failure


@message
@dataclass(frozen=True)
class Failure:
    """An action's error: an ApiError by its class name, status and code; anything else by its
    type alone (its message could carry request content)."""

    api: bool
    name: str
    message: str
    status: int
    code: str


# -- the deposit API ---------------------------------------------------------------------------
@message
@dataclass(frozen=True)
class Policy:
    readers: tuple[str, ...] = ()
    expires_at: float | None = None
    not_before: float | None = None
    max_retrievals: int | None = None


@message
@dataclass(frozen=True)
class Register:
    org: str
    secret_digest: bytes  # SHA-256 of the auth secret: the secret stays in the process that got it
    name: str
    public_key: bytes
    source: str


@message
@dataclass(frozen=True)
class Authenticate:
    """A signed request whose work is done in the worker once this committed (entropy)."""


@message
@dataclass(frozen=True)
class WhoAmI:
    pass


@message
@dataclass(frozen=True)
class PutDeposit:
    name: str
    data: bytes
    policy: Policy | None


@message
@dataclass(frozen=True)
class GetDeposit:
    name: str
    owner: str | None
    version: int | None


@message
@dataclass(frozen=True)
class ListDeposits:
    shared: bool


@message
@dataclass(frozen=True)
class DeleteDeposit:
    name: str


@message
@dataclass(frozen=True)
class SetPolicy:
    name: str
    policy: Policy


@message
@dataclass(frozen=True)
class RecordEvents:
    acl_denials: list[dict[str, Any]]


# -- admin -------------------------------------------------------------------------------------
@message
@dataclass(frozen=True)
class Seal:
    pass


@message
@dataclass(frozen=True)
class RotateMasterKey:
    pass


@message
@dataclass(frozen=True)
class CreateOrg:
    name: str


@message
@dataclass(frozen=True)
class ListOrgs:
    pass


@message
@dataclass(frozen=True)
class RotateOrgSecret:
    org: str


@message
@dataclass(frozen=True)
class ListClients:
    pass


@message
@dataclass(frozen=True)
class SetClientStatus:
    client_id: str
    status: str


@message
@dataclass(frozen=True)
class ListGroups:
    org: str


@message
@dataclass(frozen=True)
class CreateGroup:
    org: str
    name: str


@message
@dataclass(frozen=True)
class ChangeGroup:
    org: str
    name: str
    add: list[str]
    remove: list[str]


@message
@dataclass(frozen=True)
class DeleteGroup:
    org: str
    name: str


@message
@dataclass(frozen=True)
class AuditTail:
    after: int
    limit: int


@message
@dataclass(frozen=True)
class Stats:
    """The writer's group-commit counters, for /metrics."""


# -- the Vault-compatible API ------------------------------------------------------------------
@message
@dataclass(frozen=True)
class VaultRequest:
    route: int  # the route's place in the table both processes build alike
    params: dict[str, str]  # its captured parts
    path: str  # the logical path: "secret/data/app"
    query: dict[str, str]
    body: dict[str, Any]
    token: str
    token_digest: bytes


@message
@dataclass(frozen=True)
class VaultOutcome:
    status: int
    data: Any
    auth: dict[str, Any] | None = None
    warnings: list[str] | None = None
    flatten: bool = False  # some sys routes also put data's members at the top level (Vault's legacy form)


# -- frames ------------------------------------------------------------------------------------
_LEN = struct.Struct(">I")
_API_ERRORS: dict[str, type[errors.ApiError]] = {c.__name__: c for c in errors.ApiError.__subclasses__()}
_API_ERRORS["ApiError"] = errors.ApiError


def frame(obj: Any) -> bytes:
    """A message's frame."""
    body = marshal.dumps(encode(obj))
    return _LEN.pack(len(body)) + body


class Frames:
    """Reassembles frames from a byte stream."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        buf = self._buf
        buf += data
        out = []
        pos = 0
        while len(buf) - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if n > self.limit:
                raise ValueError(f"frame of {n} bytes is over the limit")
            if len(buf) - pos - 4 < n:
                break
            out.append(decode(marshal.loads(bytes(buf[pos + 4 : pos + 4 + n]))))  # noqa: S302 - only this server's own processes
            pos += 4 + n
        if pos:
            del buf[:pos]
        return out


def frame_limit(deposit_limit: int) -> int:
    """A put's frame carries the deposit itself; everything else is small."""
    return deposit_limit + (1 << 20)


def failure(e: BaseException) -> Failure:
    if isinstance(e, errors.ApiError):
        return Failure(True, type(e).__name__, e.message, e.status, e.code)
    return Failure(False, type(e).__name__, "", 500, "internal")  # never the message: it could carry request content


class WriterInternalError(Exception):
    """The writer hit an unexpected error; the worker answers 500 without details."""


def raise_failure(f: Failure) -> None:
    if not f.api:
        raise WriterInternalError(f.name)
    cls = _API_ERRORS.get(f.name)
    if cls is not None and (cls.status, cls.code) == (f.status, f.code):  # the Vault API has its own Invalid
        raise cls(f.message)
    e = errors.ApiError(f.message)  # an error class of a layer above (the Vault API's): by its status
    e.status, e.code = f.status, f.code
    raise e
