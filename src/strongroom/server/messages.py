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
# Each message class's own encoder and decoder, made once at registration: the codec runs twice on
# each side of every request, so it does no generic walk.
_ENCODE: dict[type[Any], Callable[[Any], tuple[str, str, tuple[Any, ...]]]] = {}
_DECODE: dict[str, Callable[[tuple[Any, ...]], Any]] = {}
MESSAGES: dict[str, type[Any]] = {}  # the closed list of what may cross

Checked = tuple[str, str, int]  # a request whose signature held: (client id, nonce, timestamp)


def _register(cls: type[Any], carried: str | None) -> type[Any]:
    names = tuple(f.name for f in dataclasses.fields(cls))
    name = cls.__name__
    get: Callable[[Any], tuple[Any, ...]]
    if len(names) > 1:
        get = operator.attrgetter(*names)
    elif names:
        one = operator.attrgetter(names[0])
        get = lambda v: (one(v),)  # noqa: E731
    else:
        get = lambda v: ()  # noqa: E731
    enc: Callable[[Any], tuple[str, str, tuple[Any, ...]]]
    dec: Callable[[tuple[Any, ...]], Any]
    if carried is None:
        enc = lambda v: (TAG, name, get(v))  # noqa: E731
        dec = lambda f: cls(*f)  # noqa: E731
    else:
        i = names.index(carried)

        def enc(v: Any) -> tuple[str, str, tuple[Any, ...]]:
            f = get(v)
            inner = _ENCODE.get(type(f[i]))
            if inner is None:  # plain data (a result that is not a message) stays as it is
                return (TAG, name, f)
            return (TAG, name, (*f[:i], inner(f[i]), *f[i + 1 :]))

        def dec(f: tuple[Any, ...]) -> Any:
            if type(f[i]) is tuple:
                return cls(*f[:i], decode(f[i]), *f[i + 1 :])
            return cls(*f)

    MESSAGES[name] = cls
    _ENCODE[cls] = enc
    _DECODE[name] = dec
    return cls


def message(cls: type[Any]) -> type[Any]:
    """Register a dataclass of plain fields as a message that may cross between processes."""
    return _register(cls, None)


def carrier(field: str) -> Callable[[type[Any]], type[Any]]:
    """Register a message whose ``field`` may hold another message."""
    return lambda cls: _register(cls, field)


def encode(value: Any) -> Any:
    """A message (and the message its carrying field holds) as marshal-able tuples; plain values
    as they are (marshal refuses anything else, so an unregistered class goes no further)."""
    enc = _ENCODE.get(type(value))
    return value if enc is None else enc(value)


def decode(value: Any) -> Any:
    if type(value) is tuple and len(value) == 3 and value[0] == TAG:
        dec = _DECODE.get(value[1])
        if dec is None or type(value[2]) is not tuple:
            raise ValueError("not a message this server sends")
        return dec(value[2])
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
    request_id: str = ""  # an ApprovalRequired's pending request


# -- the deposit API ---------------------------------------------------------------------------
@message
@dataclass(slots=True)
class Policy:
    readers: tuple[str, ...] = ()
    expires_at: float | None = None
    not_before: float | None = None
    max_retrievals: int | None = None
    approvers: tuple[str, ...] = ()
    approvals_required: int = 0
    approval_window: int = 0


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


@message
@dataclass(slots=True)
class TangRequest:
    """An unauthenticated Tang request (tang.py): "adv" (kid optional) or "rec" (a JWK's text)."""

    kind: str
    kid: str | None
    body: str
    source: str


@message
@dataclass(slots=True)
class RotateTang:
    pass


@message
@dataclass(slots=True)
class CreateAdmin:
    name: str
    public_key: bytes


@message
@dataclass(slots=True)
class ListApprovals:
    pass


@message
@dataclass(slots=True)
class VoteApproval:
    request_id: str
    approve: bool


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


# -- KMIP --------------------------------------------------------------------------------------
@message
@dataclass(slots=True)
class IssueKmipCert:
    csr: str
    days: int


@message
@dataclass(slots=True)
class KmipRequest:
    """A KMIP request message's batch, from a client its TLS certificate named."""

    client_id: str
    major: int  # the request's protocol version
    minor: int
    keep_going: bool  # Batch Error Continuation Option Continue (else Stop)
    items: list[tuple[int, bytes]]  # (operation, request payload TTLV)


# -- frames ------------------------------------------------------------------------------------
_LEN = struct.Struct(">I")
_CALL, _REPLY, _OTHER = 0, 1, 2  # a frame's first field
_API_ERRORS: dict[str, type[errors.ApiError]] = {c.__name__: c for c in errors.ApiError.__subclasses__()}
_API_ERRORS["ApiError"] = errors.ApiError
_API_ERRORS["ApprovalRequired"] = errors.ApprovalRequired


def frame(obj: Any) -> bytes:
    """A message's frame.  The two envelopes every request crosses in (``Call`` out, ``Reply``
    back) are laid flat, their message's name and fields beside their own, so a request costs
    one constructor per message at each end and no walk."""
    t = type(obj)
    if t is Call:
        body = _flat(obj.body)
        payload: tuple[Any, ...] = (_CALL, obj.rid, obj.raw_path, obj.checked, body[0], body[1])
    elif t is Reply:
        result = _flat(obj.result)
        payload = (_REPLY, obj.rid, obj.ok, result[0], result[1])
    else:
        payload = (_OTHER, encode(obj))
    data = marshal.dumps(payload)
    return _LEN.pack(len(data)) + data


def _flat(value: Any) -> tuple[str | None, Any]:
    """(message name, encoded fields), or (None, the plain value)."""
    enc = _ENCODE.get(type(value))
    if enc is None:
        return None, value
    _tag, name, fields = enc(value)
    return name, fields


def _unflat(name: Any, fields: Any) -> Any:
    if name is None:
        return fields
    dec = _DECODE.get(name)
    if dec is None or type(fields) is not tuple:
        raise ValueError("not a message this server sends")
    return dec(fields)


def _unframe(payload: Any) -> Any:
    if type(payload) is not tuple or not payload:
        raise ValueError("not a message this server sends")
    kind = payload[0]
    if kind == _CALL and len(payload) == 6:
        return Call(payload[1], payload[2], payload[3], _unflat(payload[4], payload[5]))
    if kind == _REPLY and len(payload) == 5:
        return Reply(payload[1], payload[2], _unflat(payload[3], payload[4]))
    if kind == _OTHER and len(payload) == 2:
        return decode(payload[1])
    raise ValueError("not a message this server sends")


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
            out.append(_unframe(marshal.loads(buf[pos + 4 : pos + 4 + n])))  # noqa: S302 - only this server's own processes
            pos += 4 + n
        if pos:
            del buf[:pos]
        return out


def frame_limit(deposit_limit: int) -> int:
    """A put's frame carries the deposit itself; everything else is small."""
    return deposit_limit + (1 << 20)


def failure(e: BaseException) -> Failure:
    if isinstance(e, errors.ApiError):
        return Failure(True, type(e).__name__, e.message, e.status, e.code, getattr(e, "request_id", ""))
    return Failure(False, type(e).__name__, "", 500, "internal")  # never the message: it could carry request content


class WriterInternalError(Exception):
    """The writer hit an unexpected error; the worker answers 500 without details."""


def raise_failure(f: Failure) -> None:
    if not f.api:
        raise WriterInternalError(f.name)
    cls = _API_ERRORS.get(f.name)
    if cls is errors.ApprovalRequired:
        raise errors.ApprovalRequired(f.message, f.request_id)
    if cls is not None and (cls.status, cls.code) == (f.status, f.code):  # the Vault API has its own Invalid
        raise cls(f.message)
    e = errors.ApiError(f.message)  # an error class of a layer above (the Vault API's): by its status
    e.status, e.code = f.status, f.code
    raise e
