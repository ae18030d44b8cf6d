"""Auto-unseal from another key server's transit key (as OpenBao's transit seal): the other
server is a real Strongroom or a real OpenBao; an outage of it leaves this one sealed and
retrying; recovery shares still unseal it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import hvac
import pytest

from strongroom.client import Sealed
from strongroom.server import barrier
from strongroom.server.transitseal import TransitLink, TransitSeal
from tests.server.vault.reference import OpenBaoDev
from tests.serverproc import Deployment, eventually


def _eventually(check: Callable[[], bool], timeout: float = 30) -> None:
    eventually(check, timeout)


def _token_file(root: Path, token: str) -> Path:
    p = root / "transit-token"
    p.write_text(token + "\n")
    p.chmod(0o600)
    return p


@pytest.fixture
def guard(tmp_path: Path) -> Iterator[tuple[Deployment, TransitSeal]]:
    """A Strongroom server whose transit key "fleet" seals the other."""
    (tmp_path / "guard").mkdir()
    g = Deployment(tmp_path / "guard", None)
    g.start()
    host = g.register("sealer")
    token = host.vault_token(policies=["root"], ttl="4h")["client_token"]
    hvac.Client(url=g.url, token=token, verify=str(g.data.ca_file)).secrets.transit.create_key("fleet")
    seal = TransitSeal(g.url, "fleet", str(_token_file(tmp_path / "guard", token)), ca_file=str(g.data.ca_file))
    yield g, seal
    g.close()


def test_unseals_from_another_strongroom_and_waits_out_its_outage(tmp_path: Path, guard: tuple[Deployment, TransitSeal]) -> None:
    g, seal = guard
    (tmp_path / "fleet").mkdir()
    unlock = barrier.Unlock(hsm=TransitLink(seal))
    d = Deployment(tmp_path / "fleet", None, unlock=unlock, key_shares=3, key_threshold=2, holder=seal)
    try:
        s = d.start(sealed=True)
        _eventually(lambda: s.wait_healthy()["sealed"] is False)
        host = d.register()
        host.put("k", b"v")
        entries = d.admin(s).audit_tail(-1, 100)
        assert [e["detail"].get("by") for e in entries if e["action"] == "unseal"] == ["transit"]
        s.stop()
        g.admin().seal()  # the guard is sealed: its transit key cannot decrypt
        s = d.start(sealed=True)
        time.sleep(2)
        assert s.wait_healthy()["sealed"] is True
        with pytest.raises(Sealed):
            d.admin(s).whoami()
        assert "still sealed: the transit seal did not unseal the server" in s.log_text() and "answered 503" in s.log_text()
        assert Path(seal.token_file).read_text().strip() not in s.log_text()
        g.admin().unseal(d.pwfile.read_text().strip())
        _eventually(lambda: s.wait_healthy()["sealed"] is False, timeout=40)
    finally:
        d.close()


def test_recovery_shares_unseal_it_while_the_guard_is_down(tmp_path: Path, guard: tuple[Deployment, TransitSeal]) -> None:
    g, seal = guard
    (tmp_path / "fleet").mkdir()
    unlock = barrier.Unlock(hsm=TransitLink(seal))
    d = Deployment(tmp_path / "fleet", None, unlock=unlock, key_shares=3, key_threshold=2, holder=seal)
    try:
        for s in g.servers:
            s.stop()
        s = d.start(sealed=True)
        time.sleep(1.5)
        assert "unreachable" in s.log_text()
        admin = d.admin(s)
        admin.unseal(share=d.shares[2])
        assert admin.unseal(share=d.shares[0])["sealed"] is False
    finally:
        d.close()


def test_unseals_from_openbao(tmp_path: Path) -> None:
    bao = OpenBaoDev(tmp_path)
    try:
        hvac.Client(url=bao.url, token="root").secrets.transit.create_key("strongroom-fleet")
        seal = TransitSeal(bao.url, "strongroom-fleet", str(_token_file(tmp_path, "root")))
        (tmp_path / "fleet").mkdir()
        d = Deployment(tmp_path / "fleet", None, unlock=barrier.Unlock(hsm=TransitLink(seal)), holder=seal)
        try:
            s = d.start(sealed=True)
            _eventually(lambda: s.wait_healthy()["sealed"] is False)
            d.register().put("k", b"v")
            wrong = TransitLink(TransitSeal(bao.url, "another-key", seal.token_file))
            with pytest.raises(Exception, match="answered 400"):
                wrong.unwrap("another-key", b"vault:v1:AAAA")
        finally:
            d.close()
    finally:
        bao.stop()


def test_plain_http_is_refused_off_loopback() -> None:
    with pytest.raises(ValueError, match="https"):
        TransitSeal.from_json({"address": "http://keys.example:8200", "key": "k", "token_file": "/t"})
    assert TransitSeal.from_json({"address": "http://127.0.0.1:8200", "key": "k", "token_file": "/t"}).key == "k"
