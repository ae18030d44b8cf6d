"""Host keys at rest: a profile whose key is encrypted under a passphrase, or made in (or moved
into) a SoftHSM2 token; a copy of the profile alone acts as nobody; a key-server volume mounts
with a token-held profile, as a boot-time mount does."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from strongroom.crypto import token as token_mod
from tests.serverproc import Deployment, cli

LIB = "/usr/lib/softhsm/libsofthsm2.so"
needs_softhsm = pytest.mark.skipif(not Path(LIB).exists(), reason="softhsm2 is not installed (scripts/install.sh installs it)")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Deployment]:
    (tmp_path / "srv").mkdir()
    d = Deployment(tmp_path / "srv", None)
    d.start()
    yield d
    d.close()


def _register(d: Deployment, profile: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return cli(
        "register", "--server", d.url, "--ca", str(d.data.ca_file), "--org", d.org, "--auth-secret", d.secret,
        "--profile", str(profile), *extra, env=env,
    )  # fmt: skip


@pytest.fixture
def token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    root = tmp_path / "hsm"
    (root / "tokens").mkdir(parents=True)
    conf = root / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {root / 'tokens'}\nobjectstore.backend = file\nlog.level = ERROR\n")
    pin = root / "pin"
    pin.write_text("2468")
    pin.chmod(0o600)
    env = {"SOFTHSM2_CONF": str(conf)}
    subprocess.run(
        ["softhsm2-util", "--init-token", "--free", "--label", "host", "--pin", "2468", "--so-pin", "1357"],
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
    monkeypatch.setenv("SOFTHSM2_CONF", str(conf))
    if LIB in token_mod._libs:
        token_mod._libs[LIB].reinitialize()
    return {"pin": str(pin), "conf": str(conf), "root": str(root)}


def test_a_passphrase_protected_key(server: Deployment, tmp_path: Path) -> None:
    prof, pw = tmp_path / "host", tmp_path / "kp"
    pw.write_text("key passphrase\n")
    r = _register(server, prof, "--key-passphrase-file", str(pw))
    assert r.returncode == 0, r.stderr
    stored = (prof / "identity.key").read_text()
    assert stored.startswith("sr-key-v1.") and json.loads((prof / "profile.json").read_text())["key"]["store"] == "passphrase"
    r = cli("whoami", "--profile", str(prof))
    assert r.returncode == 1 and b"its key is encrypted: set STRONGROOM_KEY_PASSPHRASE_FILE" in r.stderr
    bad = tmp_path / "bad"
    bad.write_text("not it")
    r = cli("whoami", "--profile", str(prof), env={"STRONGROOM_KEY_PASSPHRASE_FILE": str(bad)})
    assert r.returncode == 1 and b"wrong key passphrase" in r.stderr
    r = cli("put", "k", "-", "--profile", str(prof), input=b"v", env={"STRONGROOM_KEY_PASSPHRASE_FILE": str(pw)})
    assert r.returncode == 0, r.stderr


@needs_softhsm
def test_a_key_made_in_a_token(server: Deployment, tmp_path: Path, token: dict[str, str]) -> None:
    prof = tmp_path / "host"
    r = _register(server, prof, "--pkcs11-lib", LIB, "--pkcs11-token", "host", "--pkcs11-pin-file", token["pin"])
    assert r.returncode == 0, r.stderr
    assert not (prof / "identity.key").exists()
    entry = json.loads((prof / "profile.json").read_text())["key"]
    assert entry["store"] == "pkcs11" and set(entry) == {"store", "lib", "token", "pin_file", "label", "public"}
    r = cli("put", "k", "-", "--profile", str(prof), input=b"signed in the token")
    assert r.returncode == 0, r.stderr
    assert cli("get", "k", "--profile", str(prof)).stdout == b"signed in the token"
    # the profile copied to a machine without the token acts as nobody
    elsewhere = tmp_path / "copied"
    shutil.copytree(prof, elsewhere)
    empty = Path(token["root"]) / "empty"
    empty.mkdir()
    conf = Path(token["root"]) / "other.conf"
    conf.write_text(f"directories.tokendir = {empty}\nobjectstore.backend = file\n")
    r = cli("whoami", "--profile", str(elsewhere), env={"SOFTHSM2_CONF": str(conf)})
    assert r.returncode == 1 and b"token 'host' not found" in r.stderr and b"Traceback" not in r.stderr


@needs_softhsm
def test_protect_moves_a_file_key_into_the_token(server: Deployment, tmp_path: Path, token: dict[str, str]) -> None:
    import pkcs11
    from pkcs11 import Attribute, KeyType, ObjectClass

    prof = tmp_path / "host"
    assert _register(server, prof).returncode == 0
    raw = (prof / "identity.key").read_text().strip()
    to_token = ["--pkcs11-lib", LIB, "--pkcs11-token", "host", "--pkcs11-pin-file", token["pin"]]
    r = cli("profile", "protect", "--profile", str(prof), *to_token)
    assert r.returncode == 0 and b"now in PKCS#11 token 'host'" in r.stdout, r.stderr
    assert not (prof / "identity.key").exists()
    assert cli("whoami", "--profile", str(prof)).returncode == 0
    with pkcs11.lib(LIB).get_token(token_label="host").open(user_pin="2468") as s:
        key = s.get_key(label="strongroom-host", key_type=KeyType.EC_EDWARDS, object_class=ObjectClass.PRIVATE_KEY)
        assert key[Attribute.EXTRACTABLE] is False and key[Attribute.SENSITIVE] is True
        with pytest.raises(pkcs11.exceptions.PKCS11Error):
            key[Attribute.VALUE]  # noqa: B018
    r = cli("profile", "protect", "--profile", str(prof), "--key-passphrase-file", token["pin"])
    assert r.returncode == 1 and b"in a token already" in r.stderr
    assert raw not in json.dumps(json.loads((prof / "profile.json").read_text()))
    assert base64.urlsafe_b64decode(raw + "==") not in b"".join(p.read_bytes() for p in prof.iterdir())


@needs_softhsm
def test_a_key_server_volume_mounts_with_the_token_profile(server: Deployment, tmp_path: Path, token: dict[str, str]) -> None:
    prof = tmp_path / "host"
    r = _register(server, prof, "--pkcs11-lib", LIB, "--pkcs11-token", "host", "--pkcs11-pin-file", token["pin"])
    assert r.returncode == 0, r.stderr
    lower, mnt = tmp_path / "vol", tmp_path / "vol.mnt"
    lower.mkdir()
    mnt.mkdir()
    r = cli("fs", "init", str(lower), "--key-server", "--profile", str(prof))
    assert r.returncode == 0, r.stderr
    r = cli("fs", "mount", str(lower), str(mnt), "--profile", str(prof))
    assert r.returncode == 0, r.stderr
    try:
        (mnt / "boot.txt").write_text("mounted with the token's key")
        assert (mnt / "boot.txt").read_text() == "mounted with the token's key"
    finally:
        assert cli("fs", "umount", str(mnt)).returncode == 0
