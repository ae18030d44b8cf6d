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
import operator
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strongroom.server import errors

TAG = "strongroom.message"
# name -> (class, the places of the fields that may hold messages)
MESSAGES: dict[str, tuple[type[Any], tuple[int, ...]]] = {}
_CODEC: dict[type[Any], tuple[str, Callable[[Any], tuple[Any, ...]], tuple[int, ...]]] = {}

Checked = tuple[str, str, int]  # a request whose signature held: (client id, nonce, timestamp)


def _register(cls: type[Any], carried: tuple[str, ...]) -> type[Any]:
    names = tuple(f.name for f in dataclasses.fields(cls))
    get: Callable[[Any], tuple[Any, ...]]
    if len(names) > 1:
        get = operator.attrgetter(*names)
    elif names:
        one = operator.attrgetter(names[0])
        get = lambda v: (one(v),)  # noqa: E731
    else:
        get = lambda v: ()  # noqa: E731
    places = tuple(names.index(n) for n in carried)
    MESSAGES[cls.__name__] = (cls, places)
    _CODEC[cls] = (cls.__name__, get, places)
    return cls


def message(cls: type[Any]) -> type[Any]:
    """Register a dataclass of plain fields as a message that may cross between processes."""
    return _register(cls, ())


def carrier(*fields: str) -> Callable[[type[Any]], type[Any]]:
    """Register a message whose ``fields`` may hold other messages (each field is encoded by a
    lookup, not a walk: the codec is on every request's path)."""
    return lambda cls: _register(cls, fields)


def encode(value: Any) -> Any:
    """A message (and the messages its carrying fields hold) as marshal-able tuples; plain values
    as they are (marshal refuses anything else, so an unregistered class goes no further)."""
    spec = _CODEC.get(type(value))
    if spec is None:
        return value
    name, get, places = spec
    fields = get(value)
    for i in places:
        if type(fields[i]) in _CODEC:  # a carried message (a result that is plain data stays as it is)
            out = list(fields)
            out[i] = encode(out[i])
            fields = tuple(out)
    return (TAG, name, fields)


def decode(value: Any) -> Any:
    if type(value) is tuple and len(value) == 3 and value[0] == TAG:
        found = MESSAGES.get(value[1])
        if found is None or type(value[2]) is not tuple:
            raise ValueError("not a message this server sends")
        cls, places = found
        fields = value[2]
        for i in places:
            if type(fields[i]) is tuple:
                carried = list(fields)
                carried[i] = decode(carried[i])
                fields = tuple(carried)
        return cls(*fields)
    return value


# -- envelopes ---------------------------------------------------------------------------------
@carrier("body")
@dataclass(slots=True)
class Call:
    """One request for the writer: ``checked`` is None for a request that carries no signature
    (a registration, a Vault token's request)."""

    rid: int
    raw_path: str
    checked: Checked | None
    body: Any


@carrier("result")
@dataclass(slots=True)
class Reply:
    rid: int
    ok: bool
    result: Any  # the action's result, or a Failure


@message
@dataclass(slots=True)
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
@dataclass(slots=True)
class Policy:
    readers: tuple[str, ...] = ()
    expires_at: float | None = None
    not_before: float | None = None
    max_retrievals: int | None = None


@message
@dataclass(slots=True)
class Register:
    org: str
    secret_digest: bytes  # SHA-256 of the auth secret: the secret stays in the process that got it
    name: str
    public_key: bytes
    source: str


@message
@dataclass(slots=True)
class Authenticate:
    """A signed request whose work is done in the worker once this committed (entropy)."""


@message
@dataclass(slots=True)
class WhoAmI:
    pass


@carrier("policy")
@dataclass(slots=True)
class PutDeposit:
    name: str
    data: bytes
    policy: Policy | None


@message
@dataclass(slots=True)
class GetDeposit:
    name: str
    owner: str | None
    version: int | None


@message
@dataclass(slots=True)
class ListDeposits:
    shared: bool


@message
@dataclass(slots=True)
class DeleteDeposit:
    name: str


@carrier("policy")
@dataclass(slots=True)
class SetPolicy:
    name: str
    policy: Policy


@message
@dataclass(slots=True)
class RecordEvents:
    acl_denials: list[dict[str, Any]]


# -- admin -------------------------------------------------------------------------------------
@message
@dataclass(slots=True)
class Seal:
    pass


@message
@dataclass(slots=True)
class RotateMasterKey:
    pass


@message
@dataclass(slots=True)
class CreateOrg:
    name: str


@message
@dataclass(slots=True)
class ListOrgs:
    pass


@message
@dataclass(slots=True)
class RotateOrgSecret:
    org: str


@message
@dataclass(slots=True)
class ListClients:
    pass


@message
@dataclass(slots=True)
class SetClientStatus:
    client_id: str
    status: str


@message
@dataclass(slots=True)
class ListGroups:
    org: str


@message
@dataclass(slots=True)
class CreateGroup:
    org: str
    name: str


@message
@dataclass(slots=True)
class ChangeGroup:
    org: str
    name: str
    add: list[str]
    remove: list[str]


@message
@dataclass(slots=True)
class DeleteGroup:
    org: str
    name: str


@message
@dataclass(slots=True)
class AuditTail:
    after: int
    limit: int


@message
@dataclass(slots=True)
class Stats:
    """The writer's group-commit counters, for /metrics."""


# -- the Vault-compatible API ------------------------------------------------------------------
@message
@dataclass(slots=True)
class VaultRequest:
    route: int  # the route's place in the table both processes build alike
    params: dict[str, str]  # its captured parts
    path: str  # the logical path: "secret/data/app"
    query: dict[str, str]
    body: dict[str, Any]
    token: str
    token_digest: bytes


@message
@dataclass(slots=True)
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
