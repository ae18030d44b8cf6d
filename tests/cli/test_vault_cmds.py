"""`strongroom token create` and `strongroom policy write|read|list|delete` against a real server:
the token works with hvac, the policies bind it, a non-admin cannot write policies."""

from __future__ import annotations

import json
from pathlib import Path

import hvac

from tests.serverproc import Deployment, cli


def test_tokens_and_policies_from_the_cli(running: Deployment, tmp_path: Path) -> None:
    admin_env = {"STRONGROOM_DATA": str(running.data.path)}
    at = ("--server", running.url)
    policy = tmp_path / "app.hcl"
    policy.write_text('path "secret/data/app/*" { capabilities = ["create", "read"] }\n')
    r = cli("policy", "write", "app", str(policy), *at, env=admin_env)
    assert r.returncode == 0, r.stderr
    r = cli("policy", "list", "--json", *at, env=admin_env)
    assert json.loads(r.stdout) == ["app", "default", "root"]
    r = cli("policy", "read", "app", *at, env=admin_env)
    assert r.stdout.decode() == policy.read_text()
    r = cli("policy", "write", "bad", "-", *at, env=admin_env, input=b'path "x" { capabilities = ["fly"] }')
    assert r.returncode == 1 and b"unknown capability" in r.stderr and len(r.stderr.decode().strip().splitlines()) == 1

    running.register("cli-vault")
    env = {"STRONGROOM_PROFILE": str(running.root / "profiles" / "cli-vault")}
    r = cli("token", "create", "--ttl", "10m", "--policy", "app", env=env)
    assert r.returncode == 0, r.stderr
    token = r.stdout.decode().strip()
    v = hvac.Client(url=running.url, token=token, verify=str(running.data.ca_file))
    v.secrets.kv.v2.create_or_update_secret("app/db", {"pw": "x"})
    assert v.secrets.kv.v2.read_secret_version("app/db", raise_on_deleted_version=True)["data"]["data"] == {"pw": "x"}
    try:
        v.secrets.kv.v2.create_or_update_secret("other", {"pw": "x"})
        raise AssertionError("the policy should have refused this")
    except hvac.exceptions.Forbidden:
        pass
    r = cli("token", "create", "--json", "--uses", "1", env=env)
    auth = json.loads(r.stdout)
    assert auth["num_uses"] == 1 and auth["policies"] == ["default"]
    r = cli("policy", "write", "mine", str(policy), "--profile", str(running.root / "profiles" / "cli-vault"))
    assert r.returncode == 1 and b"permission denied" in r.stderr
    r = cli("policy", "delete", "app", *at, env=admin_env)
    assert r.returncode == 0
    try:
        v.secrets.kv.v2.read_secret_version("app/db", raise_on_deleted_version=True)
        raise AssertionError("the deleted policy should no longer allow this")
    except hvac.exceptions.Forbidden:
        pass
