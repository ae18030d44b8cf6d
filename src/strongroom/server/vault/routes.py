"""The Vault-compatible routes: path, verb, the capability each needs, and its handler.

Paths are Vault's, after ``/v1/``; ``{path*}`` takes the rest of the path.  A route whose
capability is None decides it in its handler (KV writes need "create" for a new secret and
"update" for an existing one, as Vault's existence check decides)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from strongroom.server import numbers, vault_rows
from strongroom.server import repository as repo
from strongroom.server.barrier import seal_config
from strongroom.server.errors import Refused, StorageUnavailable
from strongroom.server.service import Service
from strongroom.server.unsealing import progress
from strongroom.server.vault import hostinfo, openapi, token_routes, transit
from strongroom.server.vault import policy as pol
from strongroom.server.vault.call import Call, Plain, VaultRoute
from strongroom.server.vault.errors import Invalid, Missing, PermissionDenied
from strongroom.server.vault.kv import MOUNT, KvV2
from strongroom.server.vault.openapi import BOOL, INT, OBJ, STR, STRS
from strongroom.server.vault.tokens import iso

VERSION = "2.7.2"  # the OpenBao release whose answers this surface is tested against


def register(add: Callable[..., None], service: Service, table: list[VaultRoute]) -> None:
    """Every route into ``table`` through ``add`` (VaultEngine.add)."""
    kv = KvV2(service)
    _sys(add)
    token_routes.register(add)
    _kv(add, kv)
    transit.register(add, service)
    _SPEC[:] = [openapi.describe(table)]


# -- sys ---------------------------------------------------------------------------------------
def _mounts() -> dict[str, dict[str, Any]]:
    def entry(kind: str, description: str, options: dict[str, str] | None, accessor: str) -> dict[str, Any]:
        return {
            "accessor": accessor,
            "config": {"default_lease_ttl": 0, "force_no_cache": False, "max_lease_ttl": 0},
            "description": description,
            "external_entropy_access": False,
            "local": False,
            "options": options,
            "plugin_version": "",
            "running_plugin_version": "",
            "running_sha256": "",
            "seal_wrap": False,
            "type": kind,
            "uuid": accessor,
        }

    return {
        f"{MOUNT}/": entry("kv", "key/value secret storage (Strongroom deposits)", {"version": "2"}, "kv_strongroom"),
        "transit/": entry("transit", "encryption as a service (keys sealed by Strongroom's barrier)", {}, "transit_strongroom"),
        "sys/": entry("system", "system endpoints", None, "system_strongroom"),
    }


def _health(p: Plain) -> tuple[int, dict[str, Any]]:
    sealed = p.service.barrier.sealed
    data = {
        "initialized": True,
        "sealed": sealed,
        "standby": False,
        "replication_performance_mode": "disabled",
        "replication_dr_mode": "disabled",
        "server_time_utc": int(time.time()),
        "version": VERSION,
        **_cluster(p.service),
    }

    def code(name: str, default: int) -> int:
        raw = p.query.get(name)
        if raw is None:
            return default
        value = numbers.whole(raw, 100, 599)
        if value is None:
            raise Invalid(f"{name} must be an HTTP status code")
        return value

    for name in ("standbycode", "drsecondarycode", "performancestandbycode", "uninitcode", "sealedcode", "activecode"):
        code(name, 0)  # each override is checked; standby, DR secondary and uninitialized never apply here
    status = code("sealedcode", 503) if sealed else code("activecode", 200)
    return status, data


def _seal_status(p: Plain) -> tuple[int, dict[str, Any]]:
    sealed = p.service.barrier.sealed
    with p.service.store.snapshot() as tx:
        config = seal_config(tx)
        given = progress(tx, "unseal") if sealed and config.shares else 0
    return 200, {
        "type": "pkcs11" if config.kind == "pkcs11" else "shamir",  # a passphrase is Shamir's one-of-one case
        "initialized": True,
        "sealed": sealed,
        "t": config.threshold or 1,
        "n": config.shares or 1,
        "progress": given,
        "nonce": "",
        "recovery_seal": config.kind == "pkcs11",
        "version": VERSION,
        "commit_date": "",
        "migration": False,
        **_cluster(p.service),
        "storage_type": p.service.store.engine.dialect.name,
    }


_CLUSTER: dict[int, dict[str, str]] = {}


def _cluster(service: Service) -> dict[str, str]:
    """A stable name and id for the deployment: from its seal parameters (a random salt, not a secret)."""
    got = _CLUSTER.get(id(service))
    if got is None:
        try:
            with service.store.snapshot() as tx:
                seed = repo.get_meta(tx, "seal_params") or ""
        except StorageUnavailable:
            return {"cluster_name": "strongroom", "cluster_id": ""}  # asked again next time
        digest = hashlib.sha256(b"strongroom cluster id v1\0" + seed.encode()).hexdigest()
        ident = f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        got = _CLUSTER[id(service)] = {"cluster_name": f"strongroom-{digest[:8]}", "cluster_id": ident}
    return got


def _ui_mount(c: Call) -> dict[str, Any]:
    path = c.params.get("path", "")
    mounts = _mounts()
    for prefix, entry in mounts.items():
        if (path + "/").startswith(prefix) or path.startswith(prefix):
            if not c.caller.acl.capabilities(path) and not _any_under(c, prefix):
                c.ctx.audit.append(c.ctx.client.id, "vault.acl", c.path, "denied", capability="any")
                raise Refused(PermissionDenied())
            return {**entry, "path": prefix}
    c.ctx.audit.append(c.ctx.client.id, "vault.acl", c.path, "denied", reason="no such mount")
    e = PermissionDenied()  # Vault's answer for a path outside every mount
    e.message = f'preflight capability check returned 403, please ensure client\'s policies grant access to path "{path}/"'
    raise Refused(e)


def _any_under(c: Call, prefix: str) -> bool:
    """Whether the token has any capability somewhere under a mount (Vault's UI mount check)."""
    acl = c.caller.acl
    return acl.root or any(r.pattern.startswith(prefix) and r.capabilities - {"deny"} for r in acl.rules)


def _ui_mounts(c: Call) -> dict[str, Any]:
    secret = {k: v for k, v in _mounts().items() if k != "sys/" and (c.caller.acl.root or _any_under(c, k))}
    return {"auth": {}, "secret": secret}


def _sys_mounts(c: Call) -> dict[str, Any]:
    c.flatten = True
    return _mounts()


def _policy_names(c: Call) -> dict[str, Any]:
    names = sorted({"default", "root", *vault_rows.policy_names(c.ctx.tx)})
    c.ctx.audit.append(c.ctx.client.id, "vault.policy.list", c.path, "ok")
    if c.path.startswith("sys/policy"):  # the legacy route answers both keys, flattened
        c.flatten = True
        return {"keys": names, "policies": names}
    return {"keys": names}


def _policy_read(c: Call) -> dict[str, Any]:
    name = c.params["name"]
    if name in pol.RESERVED:
        found: tuple[str, float, int] | None = (pol.DEFAULT_POLICY if name == "default" else "", 0.0, 1)
    else:
        found = vault_rows.policy(c.ctx.tx, name)
    c.ctx.audit.append(c.ctx.client.id, "vault.policy.read", c.path, "ok" if found is not None else "denied")
    if found is None:
        raise Refused(Missing())
    text, modified, version = found
    legacy = c.path.startswith("sys/policy/")
    c.flatten = legacy
    return {
        "allow_slashes_in_identity_templates": False,
        "allow_wildcards_in_identity_templates": False,
        "cas_required": False,
        "modified": iso(modified),
        "name": name,
        "rules" if legacy else "policy": text,
        "version": version,
    }


def _admin(c: Call) -> None:
    """Policies apply to every client's tokens: only the admin credential's tokens change them."""
    if c.ctx.client.role != "admin":
        c.ctx.audit.append(c.ctx.client.id, "vault.policy", c.path, "denied", reason="not an admin")
        raise Refused(PermissionDenied())


def _policy_write(c: Call) -> None:
    _admin(c)
    name = c.params["name"]
    if not pol.NAME_RE.match(name) or name in pol.RESERVED:
        raise Invalid(f"cannot write policy {name!r}: use letters, digits, '.', '_' and '-'; root and default are built in")
    text = c.body.get("policy", c.body.get("rules"))
    if isinstance(text, dict):
        text = json.dumps(text)
    if not isinstance(text, str):
        raise Invalid("policy must be given as text (HCL or JSON)")
    try:
        pol.parse(text)
    except pol.PolicyError as e:
        raise Invalid(f"failed to parse policy: {e}") from None
    vault_rows.put_policy(c.ctx.tx, name, text, c.service.clock())
    c.ctx.audit.append(c.ctx.client.id, "vault.policy.write", c.path, "ok")


def _policy_delete(c: Call) -> None:
    _admin(c)
    name = c.params["name"]
    if name in pol.RESERVED:
        raise Invalid(f"cannot delete {name} policy")
    vault_rows.delete_policy(c.ctx.tx, name)
    c.ctx.audit.append(c.ctx.client.id, "vault.policy.delete", c.path, "ok")


def _paths(body: dict[str, Any]) -> list[str]:
    """``paths`` (a list, or one comma-separated string) or the legacy ``path``, as Vault reads them."""
    paths = body.get("paths", body.get("path"))
    if isinstance(paths, str):
        paths = [p.strip() for p in paths.split(",") if p.strip()]
    if not paths:
        raise Invalid("paths must be supplied")
    if not isinstance(paths, list) or len(paths) > 100 or not all(isinstance(p, str) for p in paths):
        raise Invalid("paths must be a list of at most 100 paths")
    return paths


def _capabilities(c: Call, acl: pol.Acl) -> dict[str, Any]:
    out: dict[str, Any] = {}
    paths = _paths(c.body)
    for p in paths:
        out[p] = ["root"] if acl.root else sorted(acl.capabilities(p)) or ["deny"]
    if len(paths) == 1:
        out["capabilities"] = out[paths[0]]
    c.flatten = True
    return out


def _capabilities_self(c: Call) -> dict[str, Any]:
    return _capabilities(c, c.caller.acl)


def _capabilities_of(field: str, find: Any, wrong: str) -> Any:
    """The handler answering for another token of the caller's client, named by ``field``."""

    def handler(c: Call) -> dict[str, Any]:
        value = c.body.get(field)
        row = find(c, value) if isinstance(value, str) and value else None
        if row is None:
            raise Invalid(wrong)
        return _capabilities(c, c.tokens.acl(c.ctx.tx, json.loads(row.policies)))

    return handler


def _host_info(c: Call) -> dict[str, Any]:
    c.require("sudo")  # as Vault: the host's details are for operators
    return hostinfo.describe()


def _no_wrapping(p: Plain) -> tuple[int, dict[str, Any]]:
    return 400, {"errors": ["response wrapping is not supported by this server"]}


_SPEC: list[dict[str, Any]] = []


def _openapi(p: Plain) -> tuple[int, dict[str, Any]]:
    return 200, _SPEC[0]


def _sys(add: Any) -> None:
    add("GET", "sys/health", _health, None, authenticated=False)
    add("GET", "sys/seal-status", _seal_status, None, authenticated=False)
    add("GET", "sys/init", lambda p: (200, {"initialized": True}), None, authenticated=False)
    # every server on one database serves every request: no leader, no standby (Vault's non-HA answer)
    add("GET", "sys/leader", lambda p: (200, {"ha_enabled": False}), None, authenticated=False)
    for op in ("wrap", "unwrap", "rewrap", "lookup"):  # named, so a client learns why, not "unsupported path"
        add("POST", f"sys/wrapping/{op}", _no_wrapping, None, authenticated=False)
    add("GET", "sys/internal/ui/mounts", _ui_mounts, None)
    add("GET", "sys/internal/ui/mounts/{path*}", _ui_mount, None)
    add("GET", "sys/mounts", _sys_mounts, "read")
    add("GET", "sys/host-info", _host_info, "read")
    for base in ("sys/policy", "sys/policies/acl"):
        add("GET", base, _policy_names, "read")
        add("LIST", base, _policy_names, "list")
        add("GET", base + "/{name}", _policy_read, "read")
        add("POST", base + "/{name}", _policy_write, "update", body={"policy": STR})
        add("DELETE", base + "/{name}", _policy_delete, "delete")
    add("GET", "sys/internal/specs/openapi", _openapi, None, authenticated=False)
    add("POST", "sys/capabilities-self", _capabilities_self, None, body={"paths": STRS})
    by_token = _capabilities_of("token", token_routes.own_by_token, "invalid token")
    by_accessor = _capabilities_of("accessor", token_routes.own_by_accessor, "invalid accessor")
    add("POST", "sys/capabilities", by_token, "update", body={"token": STR, "paths": STRS})
    add("POST", "sys/capabilities-accessor", by_accessor, "update", body={"accessor": STR, "paths": STRS})


# -- KV v2 -------------------------------------------------------------------------------------
def _version_query(c: Call) -> int | None:
    raw = c.query.get("version")
    if raw is None or raw == "":
        return None
    value = numbers.whole(raw, 0, 2**31 - 1, max_len=10)
    if value is None:
        raise Invalid("version must be a non-negative integer")
    return value or None


def _kv(add: Any, kv: KvV2) -> None:
    def read(c: Call) -> Any:
        status, data = kv.read(c.ctx, c.params["path"], _version_query(c))
        c.status = status
        return data

    def write(c: Call) -> Any:
        c.require("update" if kv.exists(c.ctx, c.params["path"]) else "create")
        return kv.write(c.ctx, c.params["path"], c.body)

    def patch(c: Call) -> Any:
        return kv.patch(c.ctx, c.params["path"], c.body)

    def delete(c: Call) -> None:
        kv.delete_latest(c.ctx, c.params["path"])

    def versions(op: str) -> Any:
        def run(c: Call) -> None:
            kv.versions(c.ctx, c.params["path"], c.body, op)

        return run

    def metadata(c: Call) -> Any:
        return kv.metadata(c.ctx, c.params["path"])

    def listing(c: Call) -> Any:
        return {"keys": kv.list(c.ctx, c.params.get("path", ""))}

    def write_metadata(c: Call) -> None:
        c.require("update" if kv.exists(c.ctx, c.params["path"]) else "create")
        kv.write_metadata(c.ctx, c.params["path"], c.body)

    def patch_metadata(c: Call) -> None:
        kv.write_metadata(c.ctx, c.params["path"], c.body, patch=True)

    def delete_metadata(c: Call) -> None:
        kv.delete_metadata(c.ctx, c.params["path"])

    def config(c: Call) -> Any:
        return {"cas_required": False, "delete_version_after": "0s", "max_versions": 0, "metadata_cas_required": False}

    m = MOUNT
    data = {"data": OBJ, "options": {"type": "object", "properties": {"cas": INT}}}
    versions_body = {"versions": {"type": "array", "items": INT}}
    meta = {"max_versions": INT, "cas_required": BOOL, "delete_version_after": STR, "custom_metadata": OBJ}
    add("GET", f"{m}/config", config, "read")
    add("GET", f"{m}/data/{{path*}}", read, "read")
    add("POST", f"{m}/data/{{path*}}", write, None, body=data)
    add("PATCH", f"{m}/data/{{path*}}", patch, "patch", body=data)
    add("DELETE", f"{m}/data/{{path*}}", delete, "delete")
    add("POST", f"{m}/delete/{{path*}}", versions("delete"), "update", body=versions_body)
    add("POST", f"{m}/undelete/{{path*}}", versions("undelete"), "update", body=versions_body)
    add("POST", f"{m}/destroy/{{path*}}", versions("destroy"), "update", body=versions_body)
    add("LIST", f"{m}/metadata/{{path*}}", listing, "list")
    add("LIST", f"{m}/metadata", listing, "list")
    add("GET", f"{m}/metadata/{{path*}}", metadata, "read")
    add("POST", f"{m}/metadata/{{path*}}", write_metadata, None, body=meta)
    add("PATCH", f"{m}/metadata/{{path*}}", patch_metadata, "patch", body=meta)
    add("DELETE", f"{m}/metadata/{{path*}}", delete_metadata, "delete")
