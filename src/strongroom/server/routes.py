"""The API's route table (docs/API.md): each route's method, path, success status, query
parameters with their bounds, and body model.  The request pipeline (front.py) parses every
request by these entries and the OpenAPI document (openapi.py) is made from them, so every
constraint is written once, here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from strongroom.server import numbers
from strongroom.server.deposits import MAX_OWNER_CHARS, MAX_VERSION
from strongroom.server.errors import Invalid
from strongroom.server.messages import Policy
from strongroom.server.service import MAX_ENTROPY


@dataclass(frozen=True)
class Param:
    """A query parameter: an int within [ge, le] (ASCII digits), a str of at most max_length
    characters, or a bool ("true" or "false")."""

    name: str
    kind: type = str
    ge: int | None = None
    le: int | None = None
    max_length: int | None = None
    default: Any = None
    required: bool = False

    def parse(self, text: str) -> Any:
        """The parameter's value; 422 for anything else."""
        if self.kind is bool:
            if text not in ("true", "false"):
                raise Invalid(f"query parameter {self.name}: must be true or false")
            return text == "true"
        if self.kind is int:
            low = -(2**63) if self.ge is None else self.ge
            high = 2**63 - 1 if self.le is None else self.le
            value = numbers.integer(text, low, high)
            if value is None:
                raise Invalid(f"query parameter {self.name}: must be a whole number from {self.ge} to {self.le}")
            return value
        if self.max_length is not None and len(text) > self.max_length:
            raise Invalid(f"query parameter {self.name}: at most {self.max_length} characters")
        return text

    def schema(self) -> dict[str, Any]:
        """The parameter as JSON Schema (the OpenAPI document)."""
        if self.kind is bool:
            out: dict[str, Any] = {"type": "boolean"}
        elif self.kind is int:
            out = {"type": "integer", "minimum": self.ge, "maximum": self.le}
        else:
            out = {"type": "string"} | ({} if self.max_length is None else {"maxLength": self.max_length})
        if self.default is not None:
            out["default"] = self.default
        return out


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    status: int = 200
    query: tuple[Param, ...] = ()
    body: type[BaseModel] | None = None
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)  # path parts with a closed set of values
    summary: str = ""

    @property
    def key(self) -> str:
        """The route's label in metrics: its path template and method."""
        return f"{self.path}:{self.method}"

    def parse_query(self, query_string: bytes) -> dict[str, Any]:
        """The query: each parameter at most once, none unknown, every required one present,
        every value within its bounds; 422 otherwise."""
        pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, strict_parsing=False)
        known = {p.name: p for p in self.query}
        raw: dict[str, str] = {}
        for name, value in pairs:
            if name not in known:
                raise Invalid(f"unknown query parameter {name[:64]!r}")
            if name in raw:
                raise Invalid(f"query parameter {name} is given more than once")
            raw[name] = value
        out: dict[str, Any] = {}
        for name, p in known.items():
            if name in raw:
                out[name] = p.parse(raw[name])
            elif p.required:
                raise Invalid(f"query parameter {name} is required")
            else:
                out[name] = p.default
        return out

    def parse_body(self, body: bytes) -> BaseModel | None:
        """The body as the route's model (None for a route that takes none, whose body must be
        empty); 422 for JSON that does not validate."""
        if self.body is None:
            if body.strip():
                raise Invalid("this route takes no request body")
            return None
        try:
            model = self.body.model_validate_json(body)
        except ValidationError as e:
            parts = []
            for err in e.errors(include_input=False)[:5]:
                where = ".".join(str(x) for x in err.get("loc", ()))
                parts.append(f"{where or 'body'}: {err.get('msg', 'invalid')}")
            raise Invalid("; ".join(parts) or "invalid request body") from None
        # JSON spells a NUL only as \u0000: text holding one is refused here, not at the database
        # (where it would fail a whole batch: an event's text goes into the audit chain)
        if b"\\u0000" in body and _holds_nul(model.model_dump()):
            raise Invalid("text may not contain NUL characters")
        return model


def _holds_nul(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if "\x00" in v:
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
    return False


# -- bodies ------------------------------------------------------------------------------------
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# Every time the API takes: a finite Unix time from 1970 to the end of year 9999, so that it can be
# stored on every database and formatted back (NaN, infinities and 1e20 answer 400).
MAX_UNIX_TIME = 253_402_300_799.0
UnixTime = Annotated[float, Field(ge=0, le=MAX_UNIX_TIME, allow_inf_nan=False)]


class PolicyModel(Strict):
    readers: list[str] = Field(default_factory=list, max_length=1000, description="client:ID or group:NAME")
    expires_at: UnixTime | None = Field(default=None, description="Unix time after which gets answer 410")
    not_before: UnixTime | None = Field(default=None, description="Unix time before which gets answer 403")
    max_retrievals: int | None = Field(default=None, ge=1, le=2**31 - 1)
    approvers: list[str] = Field(default_factory=list, max_length=100, description="client:ID or group:NAME who may approve")
    approvals_required: int = Field(default=0, ge=0, le=100, description="approvals each release needs (0: none)")
    approval_window: int = Field(default=0, ge=0, le=30 * 86400, description="seconds an approval releases for (0: one get)")

    def to_policy(self) -> Policy:
        return Policy(
            tuple(self.readers),
            self.expires_at,
            self.not_before,
            self.max_retrievals,
            tuple(self.approvers),
            self.approvals_required,
            self.approval_window,
        )


class PutRequest(Strict):
    data: str = Field(description="the deposit content, standard base64")
    policy: PolicyModel | None = None


class AclEventModel(Strict):
    volume: str = Field(max_length=64, description="the volume id, base64url")
    program: str = Field(max_length=4096)
    sha256: str = Field(pattern="^[0-9a-f]{64}$")
    uid: int = Field(ge=0, le=2**32 - 1)
    path_class: str = Field(max_length=4096, description="the directory, relative to the volume root")
    write: bool
    enforced: bool = Field(description="false: permissive mode, the access was allowed")
    count: int = Field(ge=1, le=2**31 - 1)
    first_at: UnixTime
    last_at: UnixTime
    reason: str | None = Field(
        default=None, max_length=200, description="why every access was denied (the volume's rules were refused)"
    )


class EventsRequest(Strict):
    acl_denials: list[AclEventModel] = Field(max_length=500)


class RegisterRequest(Strict):
    org: str = Field(max_length=64)
    auth_secret: str = Field(max_length=256)
    name: str = Field(max_length=128)
    public_key: str = Field(max_length=64, description="Ed25519 public key, base64url without padding")


class UnsealRequest(Strict):
    passphrase: str | None = Field(default=None, min_length=1, max_length=4096)
    share: str | None = Field(default=None, min_length=1, max_length=1024, description="one SLIP-39 unseal share")
    reset: bool = Field(default=False, description="forget the shares given so far")
    auto: bool = Field(default=False, description="let an HSM or transit seal unseal again after an admin's seal")

    @model_validator(mode="after")
    def _one(self) -> UnsealRequest:
        if sum(x is not None for x in (self.passphrase, self.share)) + self.reset + self.auto != 1:
            raise ValueError("give exactly one of passphrase, share, reset, auto")
        return self


class TangJwk(BaseModel):
    """The client's point in a Tang recovery: a P-521 JWK (other members, as clevis sends
    them, are ignored)."""

    model_config = ConfigDict(extra="ignore")
    kty: str = Field(max_length=8)
    crv: str = Field(max_length=16)
    x: str = Field(max_length=100)
    y: str = Field(max_length=100)


class RekeyRequest(Strict):
    shares: int | None = Field(default=None, ge=1, le=16, description="start: how many new shares")
    threshold: int | None = Field(default=None, ge=1, le=16, description="start: how many of them will unseal")
    nonce: str | None = Field(default=None, max_length=64, description="the rekey's nonce, with a share")
    share: str | None = Field(default=None, min_length=1, max_length=1024, description="one current share")
    cancel: bool = False

    @model_validator(mode="after")
    def _one(self) -> RekeyRequest:
        start = self.shares is not None and self.threshold is not None
        give = self.share is not None and self.nonce is not None
        if start + give + self.cancel != 1 or (not start and (self.shares, self.threshold) != (None, None)):
            raise ValueError("give shares and threshold (start), nonce and share (one current share), or cancel")
        return self


class AdminRequest(Strict):
    name: str = Field(max_length=64)
    public_key: str = Field(max_length=64, description="Ed25519 public key, base64url without padding")


class KmipCertRequest(Strict):
    csr: str = Field(max_length=16384, description="PEM certificate request, signed by the host's new key")
    days: int = Field(default=365, ge=1, le=825)


class NameRequest(Strict):
    name: str = Field(max_length=64)


class GroupChange(Strict):
    add: list[str] = Field(default_factory=list, max_length=1000)
    remove: list[str] = Field(default_factory=list, max_length=1000)


# -- routes ------------------------------------------------------------------------------------
HEALTH = Route("GET", "/health")
REGISTER = Route("POST", "/v1/register", 201, body=RegisterRequest)
WHOAMI = Route("GET", "/v1/whoami")
DEPOSIT_PUT = Route("PUT", "/v1/deposits/{name}", 201, body=PutRequest)
DEPOSIT_GET = Route(
    "GET",
    "/v1/deposits/{name}",
    query=(Param("owner", max_length=MAX_OWNER_CHARS), Param("version", int, ge=1, le=MAX_VERSION)),
)
DEPOSITS_LIST = Route("GET", "/v1/deposits", query=(Param("shared", bool, default=False),))
DEPOSIT_DELETE = Route("DELETE", "/v1/deposits/{name}")
POLICY_PUT = Route("PUT", "/v1/deposits/{name}/policy", body=PolicyModel)
EVENTS = Route("POST", "/v1/events", body=EventsRequest)
ENTROPY = Route("GET", "/v1/entropy", query=(Param("bytes", int, ge=1, le=MAX_ENTROPY, required=True),))
UNSEAL = Route("POST", "/v1/unseal", body=UnsealRequest)
SEAL_STATUS = Route("GET", "/v1/seal-status")
TANG_ADV = Route("GET", "/tang/adv")
TANG_ADV_SLASH = Route("GET", "/tang/adv/")  # what clevis asks for
TANG_ADV_KID = Route("GET", "/tang/adv/{kid}")
TANG_REC = Route("POST", "/tang/rec/{kid}", body=TangJwk)
TANG_ROTATE = Route("POST", "/v1/admin/tang/rotate")
ADMIN_CREATE = Route("POST", "/v1/admin/admins", 201, body=AdminRequest)
REKEY = Route("POST", "/v1/admin/rekey", body=RekeyRequest)
REKEY_STATUS = Route("GET", "/v1/admin/rekey")
SEAL = Route("POST", "/v1/admin/seal")
ROTATE_MASTER_KEY = Route("POST", "/v1/admin/rotate-master-key")
ORG_CREATE = Route("POST", "/v1/admin/orgs", 201, body=NameRequest)
ORGS_LIST = Route("GET", "/v1/admin/orgs")
ORG_ROTATE_SECRET = Route("POST", "/v1/admin/orgs/{org}/rotate-secret")
CLIENTS_LIST = Route("GET", "/v1/admin/clients")
CLIENT_STATUS = Route("POST", "/v1/admin/clients/{client_id}/{action}", choices={"action": ("enable", "disable", "revoke")})
GROUPS_LIST = Route("GET", "/v1/admin/orgs/{org}/groups")
GROUP_CREATE = Route("POST", "/v1/admin/orgs/{org}/groups", 201, body=NameRequest)
GROUP_CHANGE = Route("PATCH", "/v1/admin/orgs/{org}/groups/{name}", body=GroupChange)
GROUP_DELETE = Route("DELETE", "/v1/admin/orgs/{org}/groups/{name}")
KMIP_CERT = Route("POST", "/v1/kmip/certificate", 201, body=KmipCertRequest)
APPROVALS_LIST = Route("GET", "/v1/approvals")
APPROVAL_VOTE = Route("POST", "/v1/approvals/{request_id}/{action}", choices={"action": ("approve", "deny")})
AUDIT = Route(
    "GET",
    "/v1/admin/audit",
    query=(Param("after", int, ge=-1, le=2**62, default=-1), Param("limit", int, ge=1, le=1000, default=50)),
)
