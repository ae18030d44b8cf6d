"""KV v2 at ``secret/`` over deposits: a secret is the caller's deposit named by its path, each
KV version a deposit version (stored sealed by the barrier like every deposit), its settings and
deleted or destroyed versions kept beside it (kv_settings, kv_versions).

A value is the JSON object as the client sent it, serialised compactly: the deposit API's `get`
of the same name returns exactly those bytes."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from strongroom.server import numbers, vault_rows
from strongroom.server.ctx import Ctx
from strongroom.server.errors import Refused
from strongroom.server.repository import DepositRow
from strongroom.server.service import Service
from strongroom.server.vault import durations, jsonshape
from strongroom.server.vault.errors import Invalid, Missing
from strongroom.server.vault.tokens import iso
from strongroom.server.vault_rows import KvSettingsRow

MOUNT = "secret"
DEFAULT_MAX_VERSIONS = 10
MAX_VERSIONS_LIMIT = 1000
MAX_CUSTOM_METADATA = 64
# A KV path: segments of the deposit names' characters, joined by "/" (Vault allows more).
PATH_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
MAX_PATH = 128


def check_path(path: str) -> str:
    if len(path) > MAX_PATH or not PATH_RE.match(path):
        raise Invalid(
            f"unsupported secret path {path[:60]!r}: use segments of letters, digits, '.', '_' and '-' "
            f"(each starting with a letter or digit) joined by '/', at most {MAX_PATH} characters"
        )
    return path


States = dict[int, tuple[float | None, bool]]


def _deleted_at(s: KvSettingsRow, v: int, times: dict[int, float], states: States) -> float | None:
    """When version ``v`` is, was or will be deleted: by hand, or by the delete_version_after in
    force when it was written (stamped then, as OpenBao does: setting it later leaves the versions
    already written alone)."""
    return states.get(v, (None, False))[0]


def _versions_arg(body: dict[str, Any]) -> list[int]:
    raw = body.get("versions")
    if isinstance(raw, str):
        raw = [v for v in raw.split(",") if v.strip()]
    if not isinstance(raw, list) or not raw or len(raw) > MAX_VERSIONS_LIMIT:
        raise Invalid("no version number provided")
    out = []
    for v in raw:
        if isinstance(v, str) and numbers.is_digits(v.strip()):
            v = int(v.strip())
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 2**31 - 1:
            raise Invalid("versions must be positive integers")
        out.append(v)
    return out


class KvV2:
    def __init__(self, service: Service) -> None:
        self.service = service

    @property
    def clock(self) -> Any:
        return self.service.clock

    # -- the pieces of an answer ---------------------------------------------------------------
    def _version_meta(self, dep: DepositRow, s: KvSettingsRow, v: int, times: dict[int, float], states: States) -> dict[str, Any]:
        created = times.get(v)
        deleted_at = _deleted_at(s, v, times, states)
        destroyed = states.get(v, (None, False))[1]
        return {
            "created_time": iso(created if created is not None else dep.updated),
            "deletion_time": iso(deleted_at) if deleted_at is not None else "",
            "destroyed": destroyed,
        }

    def _custom(self, s: KvSettingsRow) -> dict[str, str] | None:
        out: dict[str, str] = json.loads(s.custom_metadata)
        return out or None

    def _own(self, ctx: Ctx, path: str) -> DepositRow | None:
        return self.service.deposits.find_own(ctx, check_path(path))

    def exists(self, ctx: Ctx, path: str) -> bool:
        return self._own(ctx, path) is not None

    # -- data ----------------------------------------------------------------------------------
    def read(self, ctx: Ctx, path: str, version: int | None) -> tuple[int, dict[str, Any]]:
        """(status, data) of a read: 200 with the value, or 404 with its metadata when that
        version is deleted or destroyed (as Vault answers), or a bare 404."""
        found = vault_rows.kv_version_read(ctx.tx, ctx.client.id, check_path(path), version or None)
        target = f"{MOUNT}/data/{path}"
        if found is None:
            ctx.audit.append(ctx.client.id, "vault.kv.read", target, "denied", reason="not found")
            raise Refused(Missing())
        dep, s, v, created, state = found
        times = {} if created is None else {v: created}
        states = {} if state is None else {v: state}
        if v > dep.latest_version or v < s.oldest_version or v not in times and not states.get(v, (None, False))[1]:
            ctx.audit.append(ctx.client.id, "vault.kv.read", target, "denied", reason="no such version", version=v)
            raise Refused(Missing())
        meta = {**self._version_meta(dep, s, v, times, states), "custom_metadata": self._custom(s), "version": v}
        deleted_at = _deleted_at(s, v, times, states)
        if meta["destroyed"] or deleted_at is not None and deleted_at <= self.clock():
            ctx.audit.append(ctx.client.id, "vault.kv.read", target, "denied", reason="version deleted", version=v)
            return 404, {"data": None, "metadata": meta}
        raw = self.service.deposits.retrieve(ctx, dep, v, "vault.kv.read", target, kv_checked=True)
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            value = None
        if not isinstance(value, dict):
            raise Invalid("this deposit was not written as a KV secret (its content is not a JSON object)")
        jsonshape.check_text(raw, value, "this deposit cannot be read as a KV secret")  # (written through the deposit API)
        return 200, {"data": value, "metadata": meta}

    def write(self, ctx: Ctx, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = body.get("data")
        if not isinstance(data, dict):
            raise Invalid("no data provided")
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise Invalid("options must be an object")
        return self._store(ctx, path, data, options.get("cas"), "vault.kv.write")

    def patch(self, ctx: Ctx, path: str, body: dict[str, Any]) -> dict[str, Any]:
        patch = body.get("data")
        if not isinstance(patch, dict):
            raise Invalid("no data provided")
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise Invalid("options must be an object")
        status, current = self.read(ctx, path, None)
        if status != 200:
            raise Refused(Missing())
        return self._store(ctx, path, _merge(current["data"], patch), options.get("cas"), "vault.kv.patch")

    def _store(self, ctx: Ctx, path: str, data: dict[str, Any], cas: object, action: str) -> dict[str, Any]:
        raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
        dep = self._own(ctx, path)
        s = vault_rows.kv_settings(ctx.tx, dep.id) if dep is not None else vault_rows.KV_DEFAULTS
        current = dep.latest_version if dep is not None else 0
        if cas is not None:
            if not isinstance(cas, int) or isinstance(cas, bool) or cas < 0:
                raise Invalid("cas must be a non-negative integer")
            if cas != current:
                ctx.audit.append(ctx.client.id, action, f"{MOUNT}/data/{path}", "denied", reason="cas mismatch")
                raise Refused(Invalid("check-and-set parameter did not match the current version"))
        elif s.cas_required:
            raise Invalid("check-and-set parameter required for this call")
        out = self.service.deposits.put_named(ctx, path, raw, None, action)
        dep = self.service.deposits.find_own(ctx, path)
        assert dep is not None
        keep = s.max_versions or DEFAULT_MAX_VERSIONS
        oldest = max(s.oldest_version, 1)
        if dep.latest_version - oldest + 1 > keep:
            oldest = dep.latest_version - keep + 1
            self.service.barrier.destroy_versions_below(ctx.tx, dep.id, oldest)
            s = dataclasses.replace(s, oldest_version=oldest)
            vault_rows.set_kv_settings(ctx.tx, dep.id, s)
        elif dep.latest_version == 1:
            vault_rows.set_kv_settings(ctx.tx, dep.id, s)  # marks the deposit as a KV secret from its first version
        times = self.service.barrier.version_times(ctx.tx, dep.id)
        v = int(out["version"])
        states: States = {}
        if s.delete_version_after and v in times:
            states[v] = (times[v] + s.delete_version_after, False)
            vault_rows.set_kv_version_state(ctx.tx, dep.id, v, states[v][0], False)
        meta = self._version_meta(dep, s, v, times, states)
        return {**meta, "custom_metadata": self._custom(s), "version": v}

    # -- versions ------------------------------------------------------------------------------
    def delete_latest(self, ctx: Ctx, path: str) -> None:
        dep = self._own(ctx, path)
        if dep is None:
            return  # Vault answers 204 for a path with nothing to delete
        self._set_states(ctx, dep, [dep.latest_version], "delete")

    def versions(self, ctx: Ctx, path: str, body: dict[str, Any], op: str) -> None:
        versions = _versions_arg(body)
        dep = self._own(ctx, path)
        if dep is None:
            return
        self._set_states(ctx, dep, versions, op)

    def _set_states(self, ctx: Ctx, dep: DepositRow, versions: list[int], op: str) -> None:
        states = vault_rows.kv_version_states(ctx.tx, dep.id)
        s = vault_rows.kv_settings(ctx.tx, dep.id)
        now = self.clock()
        touched = []
        for v in sorted(set(versions)):
            if v < max(1, s.oldest_version) or v > dep.latest_version:
                continue
            deleted_at, destroyed = states.get(v, (None, False))
            if destroyed:
                continue
            if op == "delete" and (deleted_at is None or deleted_at > now):  # a scheduled deletion comes now
                vault_rows.set_kv_version_state(ctx.tx, dep.id, v, now, False)
            elif op == "undelete" and deleted_at is not None:
                vault_rows.set_kv_version_state(ctx.tx, dep.id, v, None, False)
            elif op == "destroy":
                self.service.barrier.destroy_version(ctx.tx, dep.id, v)
                vault_rows.set_kv_version_state(ctx.tx, dep.id, v, deleted_at, True)
            else:
                continue
            touched.append(v)
        vault_rows.set_kv_settings(ctx.tx, dep.id, s)
        ctx.audit.append(ctx.client.id, f"vault.kv.{op}", f"{MOUNT}/{op}/{dep.name}", "ok", versions=touched)

    # -- metadata ------------------------------------------------------------------------------
    def metadata(self, ctx: Ctx, path: str) -> dict[str, Any]:
        dep = self._own(ctx, path)
        target = f"{MOUNT}/metadata/{path}"
        if dep is None:
            ctx.audit.append(ctx.client.id, "vault.kv.metadata", target, "denied", reason="not found")
            raise Refused(Missing())
        s = vault_rows.kv_settings(ctx.tx, dep.id)
        times = self.service.barrier.version_times(ctx.tx, dep.id)
        states = vault_rows.kv_version_states(ctx.tx, dep.id)
        kept = sorted({*times, *(v for v, (_, d) in states.items() if d)})
        ctx.audit.append(ctx.client.id, "vault.kv.metadata", target, "ok")
        return {
            "cas_required": bool(s.cas_required),
            "created_time": iso(dep.created),
            "current_metadata_version": s.metadata_version,
            "current_version": dep.latest_version,
            "custom_metadata": self._custom(s),
            "delete_version_after": durations.text(s.delete_version_after),
            "max_versions": s.max_versions,
            "metadata_cas_required": False,
            "oldest_version": s.oldest_version,
            "updated_time": iso(dep.updated),
            "versions": {str(v): self._version_meta(dep, s, v, times, states) for v in kept},
        }

    def list(self, ctx: Ctx, path: str) -> list[str]:
        """The keys under ``path`` (a folder: empty or ending in "/"), folders ending in "/"."""
        prefix = path if path == "" or path.endswith("/") else path + "/"
        if prefix:
            check_path(prefix.rstrip("/"))
        keys: list[str] = []
        for name in vault_rows.deposit_names_under(ctx.tx, ctx.client.id, prefix):
            rest = name[len(prefix) :]
            head, slash, _ = rest.partition("/")
            key = head + slash
            if not keys or keys[-1] != key:
                keys.append(key)
        ctx.audit.append(ctx.client.id, "vault.kv.list", f"{MOUNT}/metadata/{prefix}", "ok" if keys else "denied")
        if not keys:
            raise Refused(Missing())
        return sorted(set(keys))

    def write_metadata(self, ctx: Ctx, path: str, body: dict[str, Any], patch: bool = False) -> None:
        dep = self._own(ctx, path)
        target = f"{MOUNT}/metadata/{path}"
        if dep is None:
            if patch:
                raise Refused(Missing())
            # Vault keeps metadata for a path with no versions yet: a deposit with none
            dep = self.service.deposits.create_empty(ctx, check_path(path), "vault.kv.metadata.create")
        s = vault_rows.kv_settings(ctx.tx, dep.id)
        if body.get("metadata_cas_required") not in (None, False):
            raise Invalid("metadata_cas_required is not supported")
        max_versions = body.get("max_versions", s.max_versions if patch or "max_versions" not in body else 0)
        if not isinstance(max_versions, int) or isinstance(max_versions, bool) or not 0 <= max_versions <= MAX_VERSIONS_LIMIT:
            raise Invalid(f"max_versions must be an integer from 0 to {MAX_VERSIONS_LIMIT}")
        cas_required = body.get("cas_required", bool(s.cas_required))
        if not isinstance(cas_required, bool):
            raise Invalid("cas_required must be true or false")
        dva = body.get("delete_version_after")
        after = s.delete_version_after if dva is None else durations.seconds(dva, "delete_version_after")
        custom = body.get("custom_metadata")
        if custom is None:
            custom_text = s.custom_metadata
        else:
            if not _string_map(custom, MAX_CUSTOM_METADATA, patch):
                raise Invalid(
                    f"custom_metadata must be an object of at most {MAX_CUSTOM_METADATA} strings "
                    "(keys up to 128, values up to 512 characters)"
                )
            merged = {**json.loads(s.custom_metadata), **custom} if patch else dict(custom)
            custom_text = json.dumps({k: v for k, v in merged.items() if v is not None}, sort_keys=True)
        s = KvSettingsRow(max_versions, int(cas_required), after, custom_text, s.oldest_version, s.metadata_version + 1)
        keep = max_versions or DEFAULT_MAX_VERSIONS
        if dep.latest_version - max(s.oldest_version, 1) + 1 > keep:
            oldest = dep.latest_version - keep + 1
            self.service.barrier.destroy_versions_below(ctx.tx, dep.id, oldest)
            s = dataclasses.replace(s, oldest_version=oldest)
        vault_rows.set_kv_settings(ctx.tx, dep.id, s)
        ctx.audit.append(ctx.client.id, "vault.kv.metadata-write", target, "ok")

    def delete_metadata(self, ctx: Ctx, path: str) -> None:
        dep = self._own(ctx, path)
        if dep is not None:
            self.service.barrier.destroy_deposit(ctx.tx, dep.id)
        ctx.audit.append(ctx.client.id, "vault.kv.metadata-delete", f"{MOUNT}/metadata/{path}", "ok" if dep else "absent")


def _string_map(value: object, most: int, nulls: bool) -> bool:
    """An object of short strings (a patch may also give null, which removes a key)."""
    return (
        isinstance(value, dict)
        and len(value) <= most
        and all(
            isinstance(k, str) and len(k) <= 128 and (isinstance(v, str) and len(v) <= 512 or nulls and v is None)
            for k, v in value.items()
        )
    )


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386), as Vault's KV patch applies it."""
    out = dict(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out
