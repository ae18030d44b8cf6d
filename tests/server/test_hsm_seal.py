"""Auto-unseal by a key in a SoftHSM2 token (Debian's softhsm2, tokens made by the test):
a server that unseals with no person present; an absent token or a wrong PIN that leaves it
sealed (503), retrying, until the token is back or recovery shares are given; seal migration
between passphrase, HSM and shares."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strongroom.client import Client, Sealed
from strongroom.crypto import token as token_mod
from strongroom.server import barrier
from strongroom.server.datadir import DataDir
from strongroom.server.hsm import HsmError, Pkcs11Link, ServerHsm
from tests.serverproc import Deployment, cli, eventually

LIB = "/usr/lib/softhsm/libsofthsm2.so"
pytestmark = pytest.mark.skipif(not Path(LIB).exists(), reason="softhsm2 is not installed (scripts/install.sh installs it)")


class Token:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "tokens"
        self.dir.mkdir(parents=True)
        self.conf = root / "softhsm2.conf"
        self.conf.write_text(f"directories.tokendir = {self.dir}\nobjectstore.backend = file\nlog.level = ERROR\n")
        self.pin = root / "pin"
        self.pin.write_text("4321\n")
        self.pin.chmod(0o600)
        subprocess.run(
            ["softhsm2-util", "--init-token", "--free", "--label", "sr", "--pin", "4321", "--so-pin", "8765"],
            env={"SOFTHSM2_CONF": str(self.conf), "PATH": "/usr/bin:/bin"},
            check=True,
            capture_output=True,
        )
        self.settings = ServerHsm(LIB, "sr", str(self.pin))


@pytest.fixture
def token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Token:
    t = Token(tmp_path / "hsm")
    monkeypatch.setenv("SOFTHSM2_CONF", str(t.conf))  # this process and the servers it starts
    if LIB in token_mod._libs:
        token_mod._libs[LIB].reinitialize()  # SoftHSM reads its configuration when initialized
    return t


@pytest.fixture
def hsm_sealed(tmp_path: Path, token: Token, db_url: str | None) -> Iterator[Deployment]:
    unlock = barrier.Unlock(hsm=Pkcs11Link(token.settings))
    d = Deployment(tmp_path, db_url, unlock=unlock, key_shares=3, key_threshold=2, holder=token.settings)
    yield d
    d.close()


def _eventually(check: Callable[[], bool], timeout: float = 20) -> None:
    eventually(check, timeout)


def test_the_key_never_leaves_the_token(token: Token) -> None:
    import pkcs11
    from pkcs11 import Attribute, KeyType, ObjectClass

    link = Pkcs11Link(token.settings)
    wrapped = link.wrap("k1", b"u" * 32)
    assert link.unwrap("k1", wrapped) == b"u" * 32
    with pytest.raises(HsmError, match="does not open"):
        link.unwrap("k1", wrapped[:-1] + bytes([wrapped[-1] ^ 1]))
    with pytest.raises(HsmError, match="has no key"):
        link.unwrap("k2", wrapped)
    lib = pkcs11.lib(LIB)
    with lib.get_token(token_label="sr").open(user_pin="4321") as s:
        key = s.get_key(label="k1", key_type=KeyType.AES, object_class=ObjectClass.SECRET_KEY)
        assert key[Attribute.EXTRACTABLE] is False and key[Attribute.SENSITIVE] is True
        with pytest.raises(pkcs11.exceptions.PKCS11Error):
            key[Attribute.VALUE]  # noqa: B018 - reading it must fail


def test_a_wrong_pin_or_a_missing_token_is_a_clear_error(token: Token, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("0000")
    with pytest.raises(HsmError, match="refused the PIN"):
        Pkcs11Link(ServerHsm(LIB, "sr", str(wrong))).wrap("k", b"u" * 32)
    with pytest.raises(HsmError, match="not found"):
        Pkcs11Link(ServerHsm(LIB, "absent", str(token.pin))).wrap("k", b"u" * 32)
    with pytest.raises(HsmError, match="does not exist"):
        Pkcs11Link(ServerHsm("/nonexistent/lib.so", "sr", str(token.pin))).wrap("k", b"u" * 32)


def test_the_server_unseals_itself(hsm_sealed: Deployment) -> None:
    s = hsm_sealed.start(workers=2, sealed=True)  # nobody gives anything
    _eventually(lambda: s.wait_healthy()["sealed"] is False)
    import hvac

    status = hvac.Client(url=s.url, verify=str(hsm_sealed.data.ca_file)).sys.read_seal_status()
    assert (status["type"], status["recovery_seal"], status["t"], status["n"]) == ("pkcs11", True, 2, 3)
    host = hsm_sealed.register()
    host.put("k", b"v")
    assert host.get("k") == b"v"
    entries = hsm_sealed.admin(s).audit_tail(-1, 100)
    assert [(e["action"], e["detail"].get("by")) for e in entries if e["action"] == "unseal"] == [("unseal", "pkcs11")]


def test_an_absent_token_leaves_it_sealed_and_retrying_until_it_is_back(hsm_sealed: Deployment, token: Token) -> None:
    hidden = token.root / "away"
    token.dir.rename(hidden)
    token.dir.mkdir()
    s = hsm_sealed.start(sealed=True)
    time.sleep(2.5)
    assert s.wait_healthy()["sealed"] is True
    admin = hsm_sealed.admin(s)
    with pytest.raises(Sealed):
        admin.whoami()
    assert "still sealed: the pkcs11 seal did not unseal the server (HSM token 'sr' not found)" in s.log_text()
    token.dir.rmdir()
    hidden.rename(token.dir)
    _eventually(lambda: s.wait_healthy()["sealed"] is False, timeout=40)  # the backoff reaches it
    admin.whoami()


def test_recovery_shares_unseal_it_when_the_pin_is_wrong(hsm_sealed: Deployment, token: Token) -> None:
    token.pin.write_text("0000\n")
    s = hsm_sealed.start(sealed=True)
    time.sleep(1.5)
    assert "refused the PIN" in s.log_text() and s.wait_healthy()["sealed"] is True
    admin = hsm_sealed.admin(s)
    admin.unseal(share=hsm_sealed.shares[0])
    assert admin.unseal(share=hsm_sealed.shares[1])["sealed"] is False
    assert "4321" not in s.log_text() and "0000" not in s.log_text()


def test_migrate_from_passphrase_to_hsm_to_shares(tmp_path: Path, token: Token) -> None:
    d = Deployment(tmp_path, None)
    try:
        data = str(d.data.path)
        s = d.start()
        host_before = d.register()
        host_before.put("kept", b"through every seal")
        s.stop()
        hsm_args = ["--hsm-lib", LIB, "--hsm-token", "sr", "--hsm-pin-file", str(token.pin)]
        r = cli("server", "migrate-seal", "--data", data, "--to", "hsm", *hsm_args, "--passphrase-file", "/dev/null")
        assert r.returncode == 1 and b"empty" in r.stderr  # the current seal's material is needed
        r = cli("server", "migrate-seal", "--data", data, "--to", "hsm", *hsm_args, "--passphrase-file", str(d.pwfile), "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == {"seal": "pkcs11", "shares": []}
        assert DataDir(d.data.path).load_config().hsm is not None
        s = d.start(sealed=True)
        _eventually(lambda: s.wait_healthy()["sealed"] is False)
        s.stop()
        r = cli("server", "audit", "verify", "--data", data)  # the HSM opens the offline tools too
        assert r.returncode == 0, r.stderr
        r = cli("server", "migrate-seal", "--data", data, "--to", "shares", "--key-shares", "2", "--key-threshold", "2", "--json")
        assert r.returncode == 0, r.stderr
        made = json.loads(r.stdout)["shares"]
        assert len(made) == 2 and DataDir(d.data.path).load_config().hsm is None
        r = cli("server", "audit", "verify", "--data", data, "--passphrase-file", str(d.pwfile))
        assert r.returncode == 1 and b"2 of 2 shares" in r.stderr  # the old passphrase opens nothing now
        shares_file = tmp_path / "s"
        shares_file.write_text("\n".join(made))
        r = cli("server", "audit", "verify", "--data", data, "--share-file", str(shares_file))
        assert r.returncode == 0 and b"intact" in r.stdout, r.stderr
        s = d.start(sealed=True)
        admin = d.admin(s)
        admin.unseal(share=made[0])
        admin.unseal(share=made[1])
        with Client([s.url], host_before.client_id, host_before._identity, d.data.ca_file) as host:
            assert host.get("kept") == b"through every seal"
        actions = [(e["action"], e["detail"].get("after")) for e in admin.audit_tail(-1, 200) if e["action"] == "seal.migrate"]
        assert actions == [("seal.migrate", "pkcs11"), ("seal.migrate", "shares")]
    finally:
        d.close()


def test_an_admins_seal_holds_until_unseal_auto(hsm_sealed: Deployment) -> None:
    """The HSM does not undo an admin's emergency seal, not even after a restart; `server
    unseal --auto` hands the server back to it."""
    s = hsm_sealed.start(sealed=True)
    _eventually(lambda: s.wait_healthy()["sealed"] is False)
    admin = hsm_sealed.admin(s)
    admin.seal()
    time.sleep(2.5)
    assert s.wait_healthy()["sealed"] is True
    s.stop()
    s = hsm_sealed.start(sealed=True)
    time.sleep(2.0)
    assert s.wait_healthy()["sealed"] is True and "sealed by an admin" in s.log_text()
    r = cli("server", "unseal", "--auto", "--data", str(hsm_sealed.data.path), "--server", s.url)
    assert r.returncode == 0, r.stderr
    _eventually(lambda: s.wait_healthy()["sealed"] is False)
    actions = [e["action"] for e in hsm_sealed.admin(s).audit_tail(-1, 200)]
    assert "unseal.auto" in actions and actions.count("unseal") == 2


def test_a_fifo_or_a_device_as_the_pin_file_is_refused_not_waited_on(token: Token, tmp_path: Path) -> None:
    """Opened naively, a FIFO with no writer blocks the writer process's unseal forever."""
    import os

    fifo = tmp_path / "pin-fifo"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        with pytest.raises(HsmError, match="not a regular file"):
            Pkcs11Link(ServerHsm(LIB, "sr", path)).wrap("k", b"u" * 32)
