"""One bao CLI script (kv and transit commands, token lookup), run against OpenBao and against
Strongroom: each command's exit status and what its JSON output says must agree, case by case."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable
from typing import Any

from tests.server.vault.reference import BAO, Target, targets  # noqa: F401 - the fixture

PLAIN = base64.b64encode(b"the cli's secret").decode()


def _kv(out: Any) -> Any:
    return (out["data"]["data"], out["data"]["metadata"]["version"]) if out else None


def _deleted(out: Any) -> Any:
    """A read of a deleted or destroyed version: the CLI prints its metadata and exits 0."""
    if not out:
        return out
    meta = out["data"]["metadata"]
    return (out["data"]["data"], meta["version"], meta["destroyed"], meta["deletion_time"] != "", meta["custom_metadata"])


def _keys(out: Any) -> Any:
    return sorted(out) if isinstance(out, list) else out


def _data_keys(out: Any) -> Any:
    return sorted(out["data"]) if out else None


# (arguments after `bao`, what to compare of the JSON output); "{c1}" is the ciphertext made earlier
STEPS: list[tuple[list[str], Callable[[Any], Any]]] = [
    (["kv", "put", "-format=json", "secret/cli", "user=app", "pw=s3cret"], lambda o: o["data"]["version"]),
    (["kv", "get", "-format=json", "secret/cli"], _kv),
    (["kv", "put", "-format=json", "secret/cli", "pw=rotated"], lambda o: o["data"]["version"]),
    (["kv", "get", "-format=json", "-version=1", "secret/cli"], _kv),
    (["kv", "put", "-format=json", "-cas=0", "secret/cli", "pw=x"], lambda o: o),
    (["kv", "patch", "-format=json", "secret/cli", "extra=1"], lambda o: o["data"]["version"]),
    (["kv", "get", "-format=json", "secret/cli"], _kv),
    (["kv", "put", "-format=json", "secret/team/db", "k=v"], lambda o: o["data"]["version"]),
    (["kv", "list", "-format=json", "secret/"], _keys),
    (["kv", "list", "-format=json", "secret/team"], _keys),
    (["kv", "list", "-format=json", "secret/nothing"], lambda o: o),
    (["kv", "metadata", "get", "-format=json", "secret/cli"], lambda o: (_data_keys(o), sorted(o["data"]["versions"]))),
    (["kv", "metadata", "put", "-max-versions=2", "-custom-metadata=team=ops", "secret/cli"], lambda o: o),
    (
        ["kv", "metadata", "get", "-format=json", "secret/cli"],
        lambda o: (o["data"]["max_versions"], o["data"]["custom_metadata"]),
    ),
    (["kv", "delete", "secret/cli"], lambda o: o),
    (["kv", "get", "-format=json", "secret/cli"], _deleted),
    (["kv", "undelete", "-versions=3", "secret/cli"], lambda o: o),
    (["kv", "get", "-format=json", "secret/cli"], _kv),
    (["kv", "destroy", "-versions=3", "secret/cli"], lambda o: o),
    (["kv", "get", "-format=json", "secret/cli"], _deleted),
    (["kv", "metadata", "delete", "secret/cli"], lambda o: o),
    (["kv", "get", "-format=json", "secret/cli"], lambda o: o),
    (["write", "-format=json", "-f", "transit/keys/cli"], lambda o: o["data"]["latest_version"] if o else o),
    (["read", "-format=json", "transit/keys/cli"], lambda o: (_data_keys(o), o["data"]["type"])),
    (["write", "-format=json", "transit/encrypt/cli", f"plaintext={PLAIN}"], lambda o: o["data"]["key_version"]),
    (["write", "-format=json", "transit/decrypt/cli", "ciphertext={c1}"], lambda o: o["data"]["plaintext"]),
    (["write", "-format=json", "-f", "transit/keys/cli/rotate"], lambda o: o["data"]["latest_version"] if o else o),
    (["write", "-format=json", "transit/rewrap/cli", "ciphertext={c1}"], lambda o: o["data"]["key_version"]),
    (["write", "-format=json", "transit/decrypt/cli", "ciphertext=vault:v1:bm90IGEgY2lwaGVydGV4dA=="], lambda o: o),
    (["write", "-format=json", "transit/encrypt/cli", "plaintext=!!"], lambda o: o),
    (["write", "-format=json", "transit/random/16"], lambda o: len(base64.b64decode(o["data"]["random_bytes"]))),
    (["write", "-format=json", "transit/hmac/cli", f"input={PLAIN}"], lambda o: o["data"]["hmac"][:9]),
    (["list", "-format=json", "transit/keys"], _keys),
    (["token", "lookup", "-format=json"], lambda o: sorted(o["data"]) and o["data"]["policies"]),
    (["status", "-format=json"], lambda o: (o["initialized"], o["sealed"], o["type"], o["ha_enabled"])),
    (
        ["token", "create", "-format=json", "-period=1h", "-policy=default"],
        lambda o: (o["auth"]["lease_duration"], o["auth"]["renewable"], o["auth"]["policies"]),
    ),
    (["kv", "put", "-format=json", "secret/cli2", "k=v"], lambda o: o["data"]["version"]),
    (["kv", "metadata", "put", "-delete-version-after=3h", "secret/cli2"], lambda o: o),
    (["kv", "metadata", "get", "-format=json", "secret/cli2"], lambda o: o["data"]["delete_version_after"]),
    (["list", "-format=json", "secret/metadata/team"], _keys),
    (["list", "-format=json", "secret/metadata/team/"], _keys),
]


def run_bao(target: Target, args: list[str], home: str) -> tuple[int, Any]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": home,
        "BAO_TOKEN": target.root_token,
        **target.env,
    }
    p = subprocess.run([str(BAO), *args], capture_output=True, text=True, env=env, timeout=60, check=False)
    try:
        out = json.loads(p.stdout) if p.stdout.strip() else None
    except ValueError:
        out = None
    return p.returncode, out


def test_bao_cli_script_agrees_with_openbao_case_by_case(targets: dict[str, Target], tmp_path: Any) -> None:  # noqa: F811
    state: dict[str, dict[str, str]] = {name: {} for name in targets}
    mismatches = []
    for args, view in STEPS:
        got = {}
        for name, t in targets.items():
            filled = [a.format(**state[name]) if "{" in a else a for a in args]
            code, out = run_bao(t, filled, str(tmp_path))
            if args[:3] == ["write", "-format=json", "transit/encrypt/cli"] and out:
                state[name]["c1"] = out["data"]["ciphertext"]
            try:
                seen = view(out) if code == 0 else None
            except (KeyError, TypeError) as e:
                seen = f"unexpected output ({type(e).__name__}: {e})"
            got[name] = (code, seen)
        if got["openbao"] != got["strongroom"]:
            mismatches.append(f"bao {' '.join(args)}:\n  openbao    {got['openbao']}\n  strongroom {got['strongroom']}")
    assert not mismatches, "\n".join(mismatches)


def test_bao_read_with_a_wrap_ttl_is_refused_never_answered_in_plaintext(targets: dict[str, Target], tmp_path: Any) -> None:  # noqa: F811
    """OpenBao wraps the answer; Strongroom has no response wrapping and says so (docs/API.md)."""
    for t in targets.values():
        assert run_bao(t, ["kv", "put", "secret/wrapped", "k=v"], str(tmp_path))[0] == 0
    code, out = run_bao(targets["openbao"], ["read", "-wrap-ttl=30s", "-format=json", "secret/data/wrapped"], str(tmp_path))
    assert code == 0 and out["wrap_info"]["ttl"] == 30
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "BAO_TOKEN": targets["strongroom"].root_token}
    p = subprocess.run(
        [str(BAO), "read", "-wrap-ttl=30s", "-format=json", "secret/data/wrapped"],
        capture_output=True,
        text=True,
        env={**env, **targets["strongroom"].env},
        timeout=60,
        check=False,
    )
    assert p.returncode != 0 and "wrapping is not supported" in p.stderr and "k" not in (p.stdout or "")
    # and unwrapping says the same (OpenBao unwraps what it wrapped)
    ours = subprocess.run(
        [str(BAO), "unwrap", "-format=json", "s.AAAAAAAAAAAAAAAAAAAAAAAA"],
        capture_output=True,
        text=True,
        env={**env, **targets["strongroom"].env},
        timeout=60,
        check=False,
    )
    assert ours.returncode != 0 and "wrapping is not supported" in ours.stderr
    code, out = run_bao(targets["openbao"], ["unwrap", "-format=json", out["wrap_info"]["token"]], str(tmp_path))
    assert code == 0 and out["data"]["data"] == {"k": "v"}
