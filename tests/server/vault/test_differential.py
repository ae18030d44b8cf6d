"""Issue 38's differences, each checked against OpenBao in the same test: the status and the
answer's fields for the same request, case by case.  Clients: hvac and the bao CLI where they
send the request; curl where no client does (a JSON null, a namespace header on a sys path,
Vault's list query forms), as a client's odd but legal request."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import hvac.exceptions as hx
import pytest

from tests.server.vault.reference import BAO, Target, targets  # noqa: F401 - the fixture


def curl(t: Target, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One request with curl: (status, the parsed answer or None)."""
    cmd = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method, "-H", f"X-Vault-Token: {t.root_token}"]
    if isinstance(t.ca, str):
        cmd += ["--cacert", t.ca]
    for k, v in (headers or {}).items():
        cmd += ["-H", f"{k}: {v}"]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    out = subprocess.run([*cmd, t.url + "/v1/" + path], capture_output=True, text=True, timeout=30, check=True).stdout
    text, _, status = out.rpartition("\n")
    try:
        parsed = json.loads(text) if text.strip() else None
    except ValueError:
        parsed = text
    return int(status), parsed


def _shape(status: int, answer: Any) -> tuple[int, Any]:
    """What must agree: the status, the top-level keys, and data's keys (values vary by nature)."""
    if not isinstance(answer, dict):
        return status, None
    data = answer.get("data")
    return status, (sorted(answer), sorted(data) if isinstance(data, dict) else data)


def _both(targets: dict[str, Target], fn: Any) -> tuple[Any, Any]:  # noqa: F811
    return fn(targets["openbao"]), fn(targets["strongroom"])


# -- sys/init, sys/leader, sys/seal-status, bao status ------------------------------------------
@pytest.mark.parametrize("path", ["sys/init", "sys/leader", "sys/seal-status"])
def test_the_unauthenticated_sys_reads_answer_as_openbao_does(targets: dict[str, Target], path: str) -> None:  # noqa: F811
    ref, ours = _both(targets, lambda t: curl(t, "GET", path))
    assert _shape(*ours) == _shape(*ref)
    if path != "sys/seal-status":  # cluster names, versions and storage differ by nature
        assert ours == ref


def test_hvac_sees_an_initialized_unsealed_server(targets: dict[str, Target]) -> None:  # noqa: F811
    ref, ours = _both(targets, lambda t: (t.client().sys.is_initialized(), t.client().sys.is_sealed()))
    assert ours == ref == (True, False)
    ref, ours = _both(targets, lambda t: t.client().sys.read_leader_status())
    assert ours == ref


def test_bao_status_exits_zero_with_the_same_fields(targets: dict[str, Target]) -> None:  # noqa: F811
    def status(t: Target) -> tuple[int, list[str], Any]:
        p = subprocess.run([str(BAO), "status", "-format=json"], capture_output=True, text=True, timeout=60, env=_env(t))
        out = json.loads(p.stdout) if p.stdout.strip() else {}
        return p.returncode, sorted(out), (out.get("type"), out.get("initialized"), out.get("sealed"), out.get("ha_enabled"))

    ref, ours = _both(targets, status)
    assert ours == ref and ours[0] == 0


def _env(t: Target) -> dict[str, str]:
    import os

    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "BAO_TOKEN": t.root_token, **t.env}


# -- durations as Go and Java clients send them ------------------------------------------------
ACCEPTED = ["3600s0ns", "0s0ns", "1h0m0s", "1.5h", "1h30m", "90", "7d", "0", "", ".5h", "5.h", "1µs", "2h45m30s", "+1h"]
REFUSED = ["1d2h", "1x", "h", "1.5", "1 h", " 1h", "1h ", "١h", "1e3s", "1.5d", "--1h", "."]


@pytest.mark.parametrize("value", ACCEPTED + REFUSED)
def test_kv_metadata_durations_are_read_as_openbao_reads_them(targets: dict[str, Target], value: str) -> None:  # noqa: F811
    def write(t: Target) -> tuple[int, Any]:
        v = t.client()
        v.secrets.kv.v2.create_or_update_secret("durations/x", {"a": "b"})
        try:
            v.secrets.kv.v2.update_metadata("durations/x", delete_version_after=value)
        except hx.InvalidRequest:
            return 400, None
        return 204, v.secrets.kv.v2.read_secret_metadata("durations/x")["data"]["delete_version_after"]

    ref, ours = _both(targets, write)
    assert ours == ref
    assert (ours[0] == 204) is (value in ACCEPTED)  # the lists say what OpenBao does


# -- JSON null is "not given" --------------------------------------------------------------------
def test_null_optional_fields_are_unset(targets: dict[str, Target]) -> None:  # noqa: F811
    fields = {"ttl": None, "explicit_max_ttl": None, "num_uses": None, "policies": None, "display_name": None}
    ref, ours = _both(targets, lambda t: curl(t, "POST", "auth/token/create", {**fields, "renewable": None, "meta": None}))
    assert ours[0] == ref[0] == 200
    assert ours[1]["auth"]["policies"] == ref[1]["auth"]["policies"]
    ref, ours = _both(targets, lambda t: curl(t, "POST", "secret/data/nulls/x", {"data": {"a": 1}, "options": None}))
    assert ours[0] == ref[0] == 200
    meta = {"max_versions": None, "cas_required": None, "delete_version_after": None, "custom_metadata": None}
    ref, ours = _both(targets, lambda t: curl(t, "POST", "secret/metadata/nulls/x", meta))
    assert ours[0] == ref[0] == 204


# -- list: the LIST verb, ?list= as Go reads a bool, trailing slashes ----------------------------
LISTS = [
    ("GET", "secret/metadata/lists?list=true"),
    ("GET", "secret/metadata/lists?list=1"),
    ("GET", "secret/metadata/lists?list=t"),
    ("GET", "secret/metadata/lists?list=TRUE"),
    ("GET", "secret/metadata/lists?list=True"),
    ("GET", "secret/metadata/lists/?list=true"),
    ("GET", "secret/metadata/lists?list=false"),
    ("GET", "secret/metadata/lists?list=yes"),
    ("GET", "secret/metadata/lists?list="),
    ("LIST", "secret/metadata/lists"),
    ("LIST", "secret/metadata/lists/"),
    ("LIST", "secret/metadata"),
    ("LIST", "secret/metadata/"),
    ("GET", "transit/keys?list=true"),
    ("GET", "transit/keys/?list=1"),
    ("LIST", "transit/keys"),
    ("LIST", "transit/keys/"),
    ("GET", "transit/keys/listed/"),
    ("POST", "transit/keys/listed?list=true"),
]


def _keys(answer: Any) -> Any:
    data = answer.get("data") if isinstance(answer, dict) else None
    keys = data.get("keys") if isinstance(data, dict) else None
    return keys if isinstance(keys, list) else None  # a transit key's own "keys" are its versions' times


def test_every_list_form_answers_as_openbao(targets: dict[str, Target]) -> None:  # noqa: F811
    for t in targets.values():
        assert curl(t, "POST", "secret/data/lists/a", {"data": {"k": "v"}})[0] == 200
        assert curl(t, "POST", "transit/keys/listed", {})[0] in (200, 204)
    mismatches = []
    for method, path in LISTS:
        ref, ours = _both(targets, lambda t, m=method, p=path: curl(t, m, p))
        keys = [(s, _keys(a) if s == 200 else None) for s, a in (ref, ours)]
        if keys[0] != keys[1] or ref[0] != ours[0]:
            mismatches.append(f"{method} {path}: openbao {ref[0]} {keys[0][1]}, strongroom {ours[0]} {keys[1][1]}")
    assert not mismatches, "\n".join(mismatches)


# -- X-Vault-Namespace ---------------------------------------------------------------------------
NAMESPACED = [
    ("GET", "secret/data/lists/a"),
    ("GET", "sys/health"),
    ("GET", "sys/init"),
    ("GET", "sys/leader"),
    ("GET", "sys/seal-status"),
    ("GET", "sys/mounts"),
    ("GET", "auth/token/lookup-self"),
    ("POST", "transit/encrypt/listed"),
    ("GET", "sys/no-such-route"),
]


@pytest.mark.parametrize("namespace", ["team-a", "team-a/", "root", "/", ""])
def test_a_namespace_answers_as_one_that_does_not_exist(targets: dict[str, Target], namespace: str) -> None:  # noqa: F811
    mismatches = []
    for method, path in NAMESPACED:
        body = {"plaintext": "aGk="} if method == "POST" else None
        ref, ours = _both(targets, lambda t, m=method, p=path, b=body: curl(t, m, p, b, {"X-Vault-Namespace": namespace}))
        errors = [(s, a.get("errors") if isinstance(a, dict) else None) for s, a in (ref, ours)]
        if ref[0] != ours[0] or (ref[0] >= 400 and errors[0] != errors[1]):
            mismatches.append(f"{method} {path}: openbao {errors[0]}, strongroom {errors[1]}")
    assert not mismatches, "\n".join(mismatches)


def test_hvac_with_a_namespace_gets_namespace_not_found(targets: dict[str, Target]) -> None:  # noqa: F811
    def read(t: Target) -> Any:
        import hvac

        c = hvac.Client(url=t.url, token=t.root_token, verify=t.ca, namespace="team-a")
        try:
            c.secrets.kv.v2.read_secret_version("lists/a", raise_on_deleted_version=True)
        except hx.InvalidPath as e:
            return 404, e.errors
        return 200, None

    ref, ours = _both(targets, read)
    assert ours == ref == (404, ["namespace not found"])


# -- delete_version_after applies to the versions written after it is set ----------------------
def test_delete_version_after_leaves_earlier_versions_alone(targets: dict[str, Target]) -> None:  # noqa: F811
    def run(t: Target) -> list[Any]:
        v = t.client()
        kv = v.secrets.kv.v2
        kv.create_or_update_secret("dva/x", {"n": "1"})
        kv.update_metadata("dva/x", delete_version_after="1s")  # old enough to be past at once
        kv.create_or_update_secret("dva/x", {"n": "2"})
        kv.update_metadata("dva/x", delete_version_after="1h")
        kv.create_or_update_secret("dva/x", {"n": "3"})
        versions = kv.read_secret_metadata("dva/x")["data"]["versions"]
        import time

        time.sleep(1.5)
        reads = []
        for n in (1, 2, 3):
            try:
                reads.append(kv.read_secret_version("dva/x", version=n, raise_on_deleted_version=True)["data"]["data"]["n"])
            except hx.InvalidPath:
                reads.append(None)
        kv.undelete_secret_versions("dva/x", versions=[2])
        again = kv.read_secret_version("dva/x", version=2, raise_on_deleted_version=True)["data"]["data"]["n"]
        return [bool(versions[k]["deletion_time"]) for k in ("1", "2", "3")] + reads + [again]

    ref, ours = _both(targets, run)
    assert ours == ref == [False, True, True, "1", None, "3", "2"]


# -- X-Vault-Wrap-TTL: a bad value is refused as OpenBao refuses it; wrapping itself is refused --
@pytest.mark.parametrize(("value", "same"), [("abc", True), ("-5", True), ("1.5", True), ("0", True), ("30s", False)])
def test_a_wrap_ttl_is_never_ignored(targets: dict[str, Target], value: str, same: bool) -> None:  # noqa: F811
    for t in targets.values():
        assert curl(t, "POST", "secret/data/wrap/x", {"data": {"k": "v"}})[0] == 200
    ref, ours = _both(targets, lambda t: curl(t, "GET", "secret/data/wrap/x", headers={"X-Vault-Wrap-TTL": value}))
    if same:
        assert ours[0] == ref[0]
    else:  # OpenBao wraps; Strongroom refuses (docs/API.md): never the plaintext the client asked to have wrapped
        assert ref[0] == 200 and ref[1]["wrap_info"] is not None and ref[1]["data"] is None
        assert ours[0] == 400 and "wrapping is not supported" in ours[1]["errors"][0]


# -- tokens: lookup, renew and revoke another token, by token or accessor -----------------------
def _token_script(t: Target) -> list[Any]:
    v = t.client()
    tok = v.auth.token
    out: list[Any] = []

    def step(fn: Any) -> Any:
        try:
            r = fn()
        except hx.VaultError as e:  # the error's class (its status); Go's multierror wraps some texts
            out.append(("error", type(e).__name__))
            return None
        out.append(("ok", sorted(r) if isinstance(r, dict) else r.status_code))
        return r

    child = tok.create(policies=["default"], ttl="1h")["auth"]
    token, accessor = child["client_token"], child["accessor"]
    looked = step(lambda: tok.lookup(token))
    out.append((sorted(looked["data"]), looked["data"]["id"] == token, looked["data"]["policies"], looked["data"]["path"]))
    by_acc = step(lambda: tok.lookup_accessor(accessor))
    out.append((sorted(by_acc["data"]), by_acc["data"]["id"]))
    renewed = step(lambda: tok.renew(token, increment="2h"))
    out.append(7100 < renewed["auth"]["lease_duration"] <= 7200)
    listed = step(lambda: tok.list_accessors())
    out.append(accessor in listed["data"]["keys"])
    step(lambda: tok.revoke_accessor(accessor))
    step(lambda: tok.lookup(token))  # gone: bad token
    step(lambda: tok.lookup("s.not-a-token"))
    step(lambda: tok.lookup_accessor("not-an-accessor"))
    step(lambda: tok.renew("s.not-a-token"))
    step(lambda: tok.revoke("s.not-a-token"))
    # a parent revokes its child; revoke-orphan leaves the grandchild alive, without a parent
    parent = tok.create(policies=["root"], ttl="1h")["auth"]["client_token"]
    as_parent = t.client(parent)
    grandchild = as_parent.auth.token.create(policies=["default"], ttl="1h")["auth"]["client_token"]
    step(lambda: tok.revoke_and_orphan_children(parent))
    alive = t.client(grandchild).auth.token.lookup_self()["data"]
    out.append(alive["orphan"])
    second = tok.create(policies=["default"], ttl="1h")["auth"]["client_token"]
    step(lambda: tok.revoke(second))
    step(lambda: t.client(second).auth.token.lookup_self())
    # what a token with the default policy alone may do to another
    limited = t.client(tok.create(policies=["default"], ttl="1h")["auth"]["client_token"])
    step(lambda: limited.auth.token.lookup(t.root_token))
    step(lambda: limited.auth.token.list_accessors())
    return out


def test_token_lookup_renew_and_revoke_answer_as_openbao(targets: dict[str, Target]) -> None:  # noqa: F811
    ref, ours = _both(targets, _token_script)
    mismatches = [f"step {i}: openbao {a}, strongroom {b}" for i, (a, b) in enumerate(zip(ref, ours, strict=True)) if a != b]
    assert not mismatches, "\n".join(mismatches)


def test_bao_token_lookup_and_revoke(targets: dict[str, Target]) -> None:  # noqa: F811
    def run(t: Target) -> list[Any]:
        child = t.client().auth.token.create(policies=["default"], ttl="1h")["auth"]["client_token"]
        seen = []
        for args in (["token", "lookup", "-format=json", child], ["token", "revoke", child], ["token", "lookup", child]):
            p = subprocess.run([str(BAO), *args], capture_output=True, text=True, timeout=60, env=_env(t))
            data = json.loads(p.stdout)["data"] if p.returncode == 0 and "-format=json" in args else None
            seen.append((p.returncode, sorted(data) if data else None))
        return seen

    ref, ours = _both(targets, run)
    assert ours == ref and [code for code, _ in ours] == [0, 0, 2]


# -- capabilities: of the caller, of another token, of an accessor -------------------------------
CAPS_POLICY = 'path "secret/data/a" { capabilities = ["read"] }\npath "secret/data/b" { capabilities = ["create", "update"] }'


def _caps_script(t: Target) -> list[Any]:
    t.client(t.admin_token).sys.create_or_update_acl_policy("caps-p1", CAPS_POLICY)
    made = t.client().auth.token.create(policies=["caps-p1"], ttl="1h")["auth"]
    token, accessor = made["client_token"], made["accessor"]
    mine = t.client(token).sys
    out: list[Any] = []

    def data(r: Any) -> Any:
        return {k: v for k, v in r["data"].items()} if isinstance(r, dict) else r

    def step(fn: Any) -> None:
        try:
            out.append(data(fn()))
        except hx.VaultError as e:
            out.append(("error", type(e).__name__))

    step(lambda: mine.get_capabilities(["secret/data/a", "secret/data/b", "transit/keys/x"]))
    step(lambda: mine.get_capabilities(["secret/data/a, secret/data/b"]))  # one path that holds a comma
    step(lambda: t.client().sys.get_capabilities(["secret/data/a", "secret/data/b"], token=token))
    step(lambda: t.client().sys.get_capabilities(["secret/data/b"], accessor=accessor))
    step(lambda: mine.get_capabilities(["secret/data/a"], token=token))  # default policy: no sys/capabilities
    step(lambda: t.client().sys.get_capabilities(["secret/data/a"], token="s.not-a-token"))
    step(lambda: t.client().sys.get_capabilities(["secret/data/a"], accessor="not-an-accessor"))
    plain = Target(t.name, t.url, token, token, t.ca, t.env)
    for body in ({"paths": "secret/data/a,secret/data/b"}, {"path": "secret/data/b"}, {"paths": []}, {}):
        status, answer = curl(plain, "POST", "sys/capabilities-self", body)
        out.append((status, answer.get("data") if status == 200 else None))
    return out


def test_capabilities_answer_as_openbao(targets: dict[str, Target]) -> None:  # noqa: F811
    ref, ours = _both(targets, _caps_script)
    mismatches = [f"step {i}: openbao {a}, strongroom {b}" for i, (a, b) in enumerate(zip(ref, ours, strict=True)) if a != b]
    assert not mismatches, "\n".join(mismatches)


# -- token create: period, type, what is not read -------------------------------------------------
def _create_script(t: Target) -> list[Any]:
    t.client(t.admin_token).sys.create_or_update_acl_policy("creator", 'path "auth/token/create" { capabilities = ["update"] }')
    out: list[Any] = []

    def create(token: str, body: dict[str, Any]) -> Any:
        status, answer = curl(Target(t.name, t.url, token, token, t.ca, t.env), "POST", "auth/token/create", body)
        auth = answer.get("auth") if status == 200 else None
        out.append((status, answer.get("warnings") if status == 200 else None))
        return auth

    periodic = create(t.root_token, {"period": "1h", "policies": ["default"]})
    looked = t.client(periodic["client_token"]).auth.token.lookup_self()["data"]
    out.append((periodic["lease_duration"], periodic["renewable"], looked.get("period"), looked["ttl"] > 3590))
    renewed = t.client(periodic["client_token"]).auth.token.renew_self(increment="5h")["auth"]
    out.append(3590 < renewed["lease_duration"] <= 3600)  # a period, whatever the increment
    creator = create(t.root_token, {"policies": ["creator"]})["client_token"]
    create(creator, {"period": "1h", "policies": ["creator"]})  # neither root nor sudo
    create(t.root_token, {"type": "nope"})
    create(t.root_token, {"bogus": "x", "policies": ["default"]})
    create(t.root_token, {"ttl": "600s", "policies": ["default"]})
    return out


def test_token_create_reads_period_and_type_and_names_what_it_ignores(targets: dict[str, Target]) -> None:  # noqa: F811
    ref, ours = _both(targets, _create_script)
    mismatches = [f"step {i}: openbao {a}, strongroom {b}" for i, (a, b) in enumerate(zip(ref, ours, strict=True)) if a != b]
    assert not mismatches, "\n".join(mismatches)
    # batch tokens are refused, never issued as service tokens (OpenBao issues one: docs/API.md)
    status, answer = curl(targets["strongroom"], "POST", "auth/token/create", {"type": "batch"})
    assert status == 400 and "batch tokens are not supported" in answer["errors"][0]


# -- numbers and booleans sent as strings, as Vault's field types read them ----------------------
def _typed_script(t: Target) -> list[Any]:
    out: list[Any] = []
    bodies = ({"num_uses": "3", "renewable": "false", "ttl": "1h"}, {"num_uses": "x"}, {"renewable": "yes"}, {"num_uses": "-1"})
    for body in bodies:
        status, answer = curl(t, "POST", "auth/token/create", {**body, "policies": ["default"]})
        auth = answer.get("auth") if status == 200 else None
        out.append((status, (auth["num_uses"], auth["renewable"]) if auth else None))
    curl(t, "POST", "secret/data/typed/x", {"data": {"a": "b"}})
    out.append(curl(t, "POST", "secret/metadata/typed/x", {"max_versions": "5", "cas_required": "false"})[0])
    meta = t.client().secrets.kv.v2.read_secret_metadata("typed/x")["data"]
    out.append((meta["max_versions"], meta["cas_required"]))
    return out


def test_numbers_and_booleans_as_strings_are_read_as_openbao_reads_them(targets: dict[str, Target]) -> None:  # noqa: F811
    ref, ours = _both(targets, _typed_script)
    assert ours == ref


# -- a path no mount serves: Vault's 404 (and the deposit API's shape beside it) -----------------
@pytest.mark.parametrize(("method", "path"), [("GET", "kv/data/x"), ("POST", "auth/approle/login"), ("GET", "database/creds/x")])
def test_a_path_no_mount_serves_answers_vaults_404(targets: dict[str, Target], method: str, path: str) -> None:  # noqa: F811
    ref, ours = _both(targets, lambda t: curl(t, method, path, {} if method == "POST" else None))
    assert ours[0] == ref[0] == 404
    assert ours[1]["errors"] == ref[1]["errors"]
    assert ours[1]["error"] == "not_found"  # the deposit API's own shape, for its clients


def test_num_uses_counts_down_as_openbao_reports_it(targets: dict[str, Target]) -> None:  # noqa: F811
    def run(t: Target) -> list[Any]:
        made = t.client().auth.token.create(policies=["default"], ttl="1h", num_uses=3)["auth"]
        seen: list[Any] = [made["num_uses"]]
        user = t.client(made["client_token"])
        for _ in range(3):
            try:
                seen.append(user.auth.token.lookup_self()["data"]["num_uses"])
            except hx.VaultError as e:
                seen.append(type(e).__name__)
        try:
            user.auth.token.lookup_self()
        except hx.VaultError as e:
            seen.append(type(e).__name__)
        return seen

    ref, ours = _both(targets, run)
    assert ours == ref


def test_explicit_max_ttl_is_reported_as_asked(targets: dict[str, Target]) -> None:  # noqa: F811
    def run(t: Target) -> list[Any]:
        seen = []
        for kw in ({}, {"explicit_max_ttl": "2h"}):
            made = t.client().auth.token.create(policies=["default"], ttl="1h", **kw)["auth"]["client_token"]
            seen.append(t.client(made).auth.token.lookup_self()["data"]["explicit_max_ttl"])
        return seen

    ref, ours = _both(targets, run)
    assert ours == ref == [0, 7200]


@pytest.mark.parametrize("path", ["sys/nope", "transit/nope", "auth/token/nope"])
def test_a_path_a_mount_does_not_serve_is_worded_as_openbao_words_it(targets: dict[str, Target], path: str) -> None:  # noqa: F811
    ref, ours = _both(targets, lambda t: curl(t, "GET", path))
    assert ours == ref and ours[0] == 404


# -- KV metadata before the first version --------------------------------------------------------
def test_kv_metadata_before_the_first_write_is_kept_as_openbao_keeps_it(targets: dict[str, Target]) -> None:  # noqa: F811
    def run(t: Target) -> list[Any]:
        kv = t.client().secrets.kv.v2
        out: list[Any] = []
        kv.update_metadata("early/x", max_versions=3, delete_version_after="1h", custom_metadata={"team": "ops"})
        meta = kv.read_secret_metadata("early/x")["data"]
        out.append((sorted(meta), meta["current_version"], meta["oldest_version"], meta["versions"], meta["max_versions"]))
        out.append((meta["custom_metadata"], meta["delete_version_after"]))
        try:
            kv.read_secret_version("early/x", raise_on_deleted_version=True)
        except hx.InvalidPath:
            out.append("no version")
        out.append(kv.list_secrets("early")["data"]["keys"])
        written = kv.create_or_update_secret("early/x", {"k": "v"})["data"]
        out.append((written["version"], bool(written["deletion_time"])))  # the metadata's duration applies
        out.append(kv.read_secret_version("early/x", raise_on_deleted_version=True)["data"]["data"])
        kv.delete_metadata_and_all_versions("early/x")
        kv.update_metadata("early/y", max_versions=2)
        kv.delete_metadata_and_all_versions("early/y")
        try:
            kv.read_secret_metadata("early/y")
        except hx.InvalidPath:
            out.append("gone")
        return out

    ref, ours = _both(targets, run)
    assert ours == ref


def test_host_info_has_vaults_fields_and_needs_sudo(targets: dict[str, Target]) -> None:  # noqa: F811
    """No client library reads sys/host-info: curl does."""

    def run(t: Target) -> list[Any]:
        status, answer = curl(t, "GET", "sys/host-info")
        data = answer["data"]
        made = t.client().auth.token.create(policies=["default"], ttl="1h")["auth"]["client_token"]
        refused = curl(Target(t.name, t.url, made, made, t.ca, t.env), "GET", "sys/host-info")[0]
        return [status, sorted(data), sorted(data["host"]), type(data["cpu"]).__name__, refused]

    ref, ours = _both(targets, run)
    assert ours == ref and ours[0] == 200 and ours[-1] == 403
