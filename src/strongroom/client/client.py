"""Client: signed requests over TLS, failover across the profile's servers, typed errors."""

from __future__ import annotations

import base64
import functools
import json
import os
import ssl
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from strongroom.client import errors
from strongroom.client.profile import KeyStore, Profile
from strongroom.client.transport import Broken, Reply, TimedOut, Transport, Unreachable
from strongroom.crypto import reqsig
from strongroom.crypto.identity import Signer, b64u

Records = list[dict[str, Any]]
Strings = list[str]


@functools.lru_cache(maxsize=16)
def _tls_context(ca_file: str | None) -> ssl.SSLContext:
    # Shared per CA file: building a context (and parsing the CA) cost more than a request.
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def _raise_for(resp: Reply) -> None:
    if resp.status_code < 400:
        return
    try:
        body = resp.json()
        code, message = str(body.get("error", "")), str(body.get("message", ""))
        if not code and isinstance(body.get("errors"), list):  # the Vault-compatible routes' shape
            message = "; ".join(str(m) for m in body["errors"])[:500]
    except (ValueError, AttributeError):
        code, message = "", resp.text[:200]
    message = message or f"HTTP {resp.status_code}"
    s = resp.status_code
    if s == 403 and code == "approval_required":
        raise errors.ApprovalRequired(message, str(body.get("request_id", "")))
    if s in (401, 403):
        raise errors.Denied(message)
    if s == 404:
        raise errors.NotFound(message)
    if s == 410:
        raise errors.Gone(message)
    if s == 503 and code == "sealed":
        raise errors.Sealed(message)
    if s == 503 and code == "integrity_error":
        raise errors.IntegrityError(message)
    if s >= 500:
        raise errors.Unavailable(message)
    raise errors.InvalidRequest(message)


class Client:
    """Talks to one Strongroom deployment with one registered identity."""

    def __init__(
        self,
        servers: Strings,
        client_id: str,
        identity: Signer,
        ca_file: str | os.PathLike[str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        if not servers:
            raise errors.ProfileError("no server URL")
        for s in servers:
            if not s.startswith("https://"):
                raise errors.InvalidRequest(f"server URL must use https: {s}")
        self.servers = [s.rstrip("/") for s in servers]
        self._prefixes = [urlsplit(s).path for s in self.servers]  # a server may sit under a path prefix
        self.client_id = client_id
        self._identity = identity
        self.ca_file = ca_file
        self._timeout = timeout
        self._transport: Transport | None = None
        self._current = 0

    @property
    def _http(self) -> Transport:
        # Made on first use: a client that is registered and handed on (bulk enrolment) never
        # pays for a connection it does not use.
        if self._transport is None:
            ctx = _tls_context(str(self.ca_file) if self.ca_file else None)
            self._transport = Transport(ctx, self._timeout)
        return self._transport

    @classmethod
    def from_profile(cls, path: str | os.PathLike[str] | None = None) -> Client:
        p = Profile.load(path)
        return cls(p.servers, p.client_id, p.identity, p.ca_file)

    @classmethod
    def register(
        cls,
        servers: Strings,
        org: str,
        auth_secret: str,
        name: str,
        profile_dir: str | os.PathLike[str],
        ca_file: str | os.PathLike[str] | None = None,
        via: Client | None = None,
        key_store: KeyStore | None = None,
    ) -> Client:
        """Make an identity on this host, register its public key, and save the profile.

        ``via`` sends the registration over an existing client's connection (one TLS
        handshake for many registrations, e.g. when enrolling hosts in bulk).  ``key_store``:
        where the private key is kept (a file by default; profile.py).
        """
        key_store = key_store or KeyStore()
        identity = key_store.new_identity()
        body = {"org": org, "auth_secret": auth_secret, "name": name, "public_key": b64u(identity.public_bytes())}
        conn = via if via is not None else cls(servers, "", identity, ca_file)
        try:
            out = conn._send("POST", "/v1/register", json_body=body, sign=False).json()
        except BaseException:
            if via is None:
                conn.close()
            raise
        ca_pem = Path(ca_file).read_bytes() if ca_file else None
        Profile(Path(profile_dir), servers, out["client_id"], identity, name, org, key_store=key_store).save(ca_pem)
        if via is not None:
            return cls(servers, out["client_id"], identity, ca_file)
        conn.client_id, conn._identity = out["client_id"], identity
        return conn

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ------------------------------------------------------------------------------
    def signed_headers(self, method: str, target: str, body: bytes) -> dict[str, str]:
        """The authentication headers for one request (docs/API.md, Authentication), with a fresh
        nonce: ``target`` is the path and query exactly as sent."""
        path, _, query = target.partition("?")
        ts = str(int(time.time()))
        # microseconds first, then 96 random bits: unique, and in time order, so the server's
        # replay table takes each insert at the right edge of its index (docs/API.md)
        nonce = f"{time.time_ns() // 1000:016d}" + b64u(os.urandom(12))
        message = reqsig.string_to_sign(method, path, query, body, ts, nonce, self.client_id)
        return {
            reqsig.HEADER_CLIENT: self.client_id,
            reqsig.HEADER_TIME: ts,
            reqsig.HEADER_NONCE: nonce,
            reqsig.HEADER_SIG: b64u(self._identity.sign(message)),
        }

    def _send(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        sign: bool = True,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        content = json.dumps(json_body, separators=(",", ":")).encode() if json_body is not None else b""
        target = quote(path, safe="/")
        if params:
            target += "?" + urlencode(params)
        last = ""
        n = len(self.servers)
        for i in range(n):
            idx = (self._current + i) % n
            full = self._prefixes[idx] + target
            sent = {"content-type": "application/json"} if json_body is not None else {}
            sent.update(headers or {})
            if sign:
                sent.update(self.signed_headers(method, full, content))  # a fresh nonce for every attempt
            try:
                resp = self._http.request(self.servers[idx], method, full, content, sent)
            except Unreachable as e:
                last = str(e)
                continue
            except TimedOut:
                raise errors.Unavailable(f"{self.servers[idx]} did not answer in time") from None
            except Broken as e:
                raise errors.Unavailable(f"{self.servers[idx]}: {e}") from None
            self._current = idx
            _raise_for(resp)
            return resp
        raise errors.Unavailable(f"no server reachable ({', '.join(self.servers)}): {last or 'no servers'}")

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        return self._send(method, path, **kw).json()

    # -- deposits ---------------------------------------------------------------------------------
    @staticmethod
    def _policy(
        readers: Strings | None,
        expires_at: float | None,
        not_before: float | None,
        max_retrievals: int | None,
        approvers: Strings | None = None,
        approvals_required: int = 0,
        approval_window: int = 0,
    ) -> dict[str, Any]:
        return {
            "readers": list(readers or []),
            "expires_at": expires_at,
            "not_before": not_before,
            "max_retrievals": max_retrievals,
            "approvers": list(approvers or []),
            "approvals_required": approvals_required,
            "approval_window": approval_window,
        }

    def put(
        self,
        name: str,
        data: bytes,
        *,
        readers: Strings | None = None,
        expires_at: float | None = None,
        not_before: float | None = None,
        max_retrievals: int | None = None,
        approvers: Strings | None = None,
        approvals_required: int = 0,
        approval_window: int = 0,
    ) -> int:
        """Deposit ``data`` under ``name``; returns the new version.  Policy keywords replace the
        policy; ``approvals_required`` of the ``approvers`` must approve each release (or open a
        window of ``approval_window`` seconds)."""
        body: dict[str, Any] = {"data": base64.b64encode(data).decode()}
        given = (readers, expires_at, not_before, max_retrievals, approvers)
        if any(v is not None for v in given) or approvals_required or approval_window:
            body["policy"] = self._policy(*given, approvals_required, approval_window)
        return int(self._json("PUT", f"/v1/deposits/{name}", json_body=body)["version"])

    def get(self, name: str, version: int | None = None, owner: str | None = None) -> bytes:
        params: dict[str, Any] = {}
        if version is not None:
            params["version"] = version
        if owner is not None:
            params["owner"] = owner
        out = self._json("GET", f"/v1/deposits/{name}", params=params or None)
        return base64.b64decode(out["data"])

    def delete(self, name: str) -> None:
        self._send("DELETE", f"/v1/deposits/{name}")

    def list(self, shared: bool = False) -> Records:
        return list(self._json("GET", "/v1/deposits", params={"shared": "true"} if shared else None))

    def set_policy(
        self,
        name: str,
        *,
        readers: Strings | None = None,
        expires_at: float | None = None,
        not_before: float | None = None,
        max_retrievals: int | None = None,
        approvers: Strings | None = None,
        approvals_required: int = 0,
        approval_window: int = 0,
    ) -> dict[str, Any]:
        body = self._policy(readers, expires_at, not_before, max_retrievals, approvers, approvals_required, approval_window)
        return dict(self._json("PUT", f"/v1/deposits/{name}/policy", json_body=body))

    def approvals(self) -> Records:
        """Open approval requests this client may decide, and its own requests."""
        return list(self._json("GET", "/v1/approvals"))

    def approve(self, request_id: str) -> dict[str, Any]:
        return dict(self._json("POST", f"/v1/approvals/{request_id}/approve"))

    def deny(self, request_id: str) -> dict[str, Any]:
        return dict(self._json("POST", f"/v1/approvals/{request_id}/deny"))

    def report_acl_denials(self, events: Records) -> int:
        """Send access-control denials seen by this host's mounts to the server's audit log."""
        return int(self._json("POST", "/v1/events", json_body={"acl_denials": events})["recorded"])

    def vault_token(
        self,
        ttl: str | None = None,
        num_uses: int = 0,
        policies: Strings | None = None,
        display_name: str | None = None,
        no_default_policy: bool = False,
    ) -> dict[str, Any]:
        """A token for the Vault-compatible API, acting as this client (docs/API.md): the
        ``auth`` block of the login answer (``client_token``, ``accessor``, ``lease_duration``...)."""
        body: dict[str, Any] = {"num_uses": num_uses, "policies": list(policies or []), "no_default_policy": no_default_policy}
        if ttl is not None:
            body["ttl"] = ttl
        if display_name is not None:
            body["display_name"] = display_name
        return dict(self._json("POST", "/v1/auth/strongroom/login", json_body=body)["auth"])

    def _vault(self, method: str, path: str, json_body: Any = None, params: dict[str, Any] | None = None) -> Any:
        """One call to the Vault-compatible API with a token made for it alone (one use, a minute)."""
        token = self.vault_token(ttl="60s", num_uses=1, policies=["root"])["client_token"]
        headers = {"x-vault-token": token}
        reply = self._send(method, "/v1/" + path, params=params, json_body=json_body, sign=False, headers=headers)
        return reply.json() if reply.content else None

    def transit_key(self, name: str, create: bool = False) -> dict[str, Any]:
        """A transit key of this client's (``latest_version``, ``type``...), made first if asked."""
        if create:
            self._vault("POST", f"transit/keys/{name}", {})
        return dict(self._vault("GET", f"transit/keys/{name}")["data"])

    def transit_encrypt(self, name: str, plaintext: bytes) -> str:
        body = {"plaintext": base64.b64encode(plaintext).decode()}
        return str(self._vault("POST", f"transit/encrypt/{name}", body)["data"]["ciphertext"])

    def transit_decrypt(self, name: str, ciphertext: str) -> bytes:
        return base64.b64decode(self._vault("POST", f"transit/decrypt/{name}", {"ciphertext": ciphertext})["data"]["plaintext"])

    def transit_rotate(self, name: str) -> None:
        self._vault("POST", f"transit/keys/{name}/rotate", {})

    def write_acl_policy(self, name: str, text: str) -> None:
        """Create or replace a Vault ACL policy (the admin credential only)."""
        self._vault("PUT", f"sys/policies/acl/{name}", {"policy": text})

    def read_acl_policy(self, name: str) -> str:
        return str(self._vault("GET", f"sys/policies/acl/{name}")["data"]["policy"])

    def list_acl_policies(self) -> Strings:
        return list(self._vault("GET", "sys/policies/acl", params={"list": "true"})["data"]["keys"])

    def delete_acl_policy(self, name: str) -> None:
        self._vault("DELETE", f"sys/policies/acl/{name}")

    def entropy(self, n: int) -> bytes:
        return self._send("GET", "/v1/entropy", params={"bytes": n}).content

    def whoami(self) -> dict[str, Any]:
        return dict(self._json("GET", "/v1/whoami"))

    def kmip_certificate(self, csr_pem: str, days: int = 365) -> dict[str, Any]:
        """A KMIP client certificate for the key that signed ``csr_pem`` (made on this host)."""
        return dict(self._json("POST", "/v1/kmip/certificate", json_body={"csr": csr_pem, "days": days}))

    # -- admin ------------------------------------------------------------------------------------
    def create_org(self, name: str) -> dict[str, Any]:
        return dict(self._json("POST", "/v1/admin/orgs", json_body={"name": name}))

    def list_orgs(self) -> Records:
        return list(self._json("GET", "/v1/admin/orgs"))

    def rotate_org_secret(self, name: str) -> dict[str, Any]:
        return dict(self._json("POST", f"/v1/admin/orgs/{name}/rotate-secret"))

    def list_clients(self) -> Records:
        return list(self._json("GET", "/v1/admin/clients"))

    def set_client_status(self, client_id: str, action: str) -> dict[str, Any]:
        return dict(self._json("POST", f"/v1/admin/clients/{client_id}/{action}"))

    def list_groups(self, org: str) -> Records:
        return list(self._json("GET", f"/v1/admin/orgs/{org}/groups"))

    def create_group(self, org: str, name: str) -> dict[str, Any]:
        return dict(self._json("POST", f"/v1/admin/orgs/{org}/groups", json_body={"name": name}))

    def change_group(self, org: str, name: str, add: Strings = [], remove: Strings = []) -> dict[str, Any]:  # noqa: B006
        return dict(self._json("PATCH", f"/v1/admin/orgs/{org}/groups/{name}", json_body={"add": add, "remove": remove}))

    def delete_group(self, org: str, name: str) -> dict[str, Any]:
        return dict(self._json("DELETE", f"/v1/admin/orgs/{org}/groups/{name}"))

    def rotate_master_key(self) -> dict[str, Any]:
        return dict(self._json("POST", "/v1/admin/rotate-master-key"))

    def seal(self) -> dict[str, Any]:
        return dict(self._json("POST", "/v1/admin/seal"))

    def unseal(
        self, passphrase: str | None = None, share: str | None = None, reset: bool = False, auto: bool = False
    ) -> dict[str, Any]:
        """Unseal with the passphrase, give one share, forget the shares given so far, or let an
        HSM or transit seal unseal again after an admin sealed the server."""
        body: dict[str, Any] = {"passphrase": passphrase}
        if reset or auto:
            body = {"reset": True} if reset else {"auto": True}
        elif share is not None:
            body = {"share": share}
        return dict(self._json("POST", "/v1/unseal", json_body=body))

    def create_admin(self, name: str, public_key: bytes) -> dict[str, Any]:
        body = {"name": name, "public_key": b64u(public_key)}
        return dict(self._json("POST", "/v1/admin/admins", json_body=body))

    def seal_status(self) -> dict[str, Any]:
        return dict(self._json("GET", "/v1/seal-status"))

    def rekey(self, body: dict[str, Any]) -> dict[str, Any]:
        """Start a rekey (``{"shares", "threshold"}``), give a current share (``{"nonce", "share"}``)
        or cancel (``{"cancel": true}``)."""
        return dict(self._json("POST", "/v1/admin/rekey", json_body=body))

    def rekey_status(self) -> dict[str, Any]:
        return dict(self._json("GET", "/v1/admin/rekey"))

    def audit_tail(self, after: int = -1, limit: int = 50) -> Records:
        return list(self._json("GET", "/v1/admin/audit", params={"after": after, "limit": limit}))

    def health(self) -> dict[str, Any]:
        return dict(self._json("GET", "/health", sign=False))
