"""node-vault (npm), the JavaScript client, runs one script against OpenBao and against
Strongroom (tests/server/vault/node_vault_script.js): every step's status, the keys of its answer
and its values must agree, case by case, apart from the differences listed here with their
reasons.  scripts/install.sh installs node-vault into .venv/node."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.server.vault.reference import Target, targets  # noqa: F401 - the fixture

SCRIPT = Path(__file__).with_name("node_vault_script.js")
MODULES = Path(sys.executable).parent.parent / "node" / "node_modules"

# step name -> why the answers may differ (the status must still agree)
DIFFERS: dict[str, str] = {
    "mounts": "Strongroom has no cubbyhole/ or identity/ mount: the top-level keys differ",
}


def _run(t: Target) -> list[dict[str, Any]]:
    node = shutil.which("node")
    assert node is not None and (MODULES / "node-vault").is_dir(), "scripts/install.sh installs nodejs and node-vault"
    env = {"PATH": os.environ["PATH"], "VAULT_ADDR": t.url, "VAULT_TOKEN": t.root_token, "NODE_PATH": str(MODULES)}
    if isinstance(t.ca, str):
        env["VAULT_CACERT"] = t.ca
    p = subprocess.run([node, str(SCRIPT)], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    steps: list[dict[str, Any]] = json.loads(p.stdout)
    return steps


def test_node_vault_script_agrees_with_openbao_case_by_case(targets: dict[str, Target]) -> None:  # noqa: F811
    ref, ours = _run(targets["openbao"]), _run(targets["strongroom"])
    assert [s["name"] for s in ours] == [s["name"] for s in ref]
    mismatches = []
    for a, b in zip(ref, ours, strict=True):
        same = a == b if a["name"] not in DIFFERS else a["status"] == b["status"] and a != b
        if not same:
            mismatches.append(f"{a['name']}:\n  openbao    {a}\n  strongroom {b}")
    assert not mismatches, "\n".join(mismatches)
    assert all(s["status"] == 200 for s in ours if s["name"] in ("kv read", "transit decrypt", "token lookup"))
