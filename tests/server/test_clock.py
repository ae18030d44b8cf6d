"""Time windows with the service's clock injected: expiry, not-before and the request window are
checked at their edges without sleeping.  The service runs in-process on a real SQLite database
with its real barrier and committer; only the clock is the test's."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from strongroom.crypto import reqsig
from strongroom.crypto.identity import Identity, b64u
from strongroom.server import actions, barrier, storage
from strongroom.server import messages as m
from strongroom.server import repository as repo
from strongroom.server.datadir import DataDir
from strongroom.server.errors import Denied, Gone, Unauthorized
from strongroom.server.identities import secret_hash
from strongroom.server.messages import Policy
from strongroom.server.request import SignedRequest
from strongroom.server.service import Service
from strongroom.server.setup import init_server

pytestmark = pytest.mark.unit

PASSPHRASE = "correct horse battery staple"
START = 1_900_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@dataclass
class Host:
    service: Service
    clock: Clock
    identity: Identity
    client_id: str
    org_secret: tuple[str, str] = ("", "")  # the organization and its auth secret, to register others
    _nonces: Iterator[int] = field(default_factory=itertools.count)

    def another(self, name: str) -> Host:
        """Another client of the same organization on the same service."""
        identity = Identity.generate()
        org, secret = self.org_secret
        reg = self.service.submit(
            self.service.registration.action(org, secret_hash(secret), name, identity.public_bytes(), "127.0.0.1")
        ).result(10)
        return Host(self.service, self.clock, identity, reg["client_id"], self.org_secret)

    def request(self, method: str, path: str, body: bytes = b"", at: float | None = None) -> SignedRequest:
        ts = str(int(self.clock.now if at is None else at))
        nonce = f"{next(self._nonces):016d}" + b64u(os.urandom(9))
        message = reqsig.string_to_sign(method, path, "", body, ts, nonce, self.client_id)
        headers = {
            reqsig.HEADER_CLIENT: self.client_id,
            reqsig.HEADER_TIME: ts,
            reqsig.HEADER_NONCE: nonce,
            reqsig.HEADER_SIG: b64u(self.identity.sign(message)),
        }
        return SignedRequest(method, path, "", body, headers)

    def run(self, req: SignedRequest, message: Any) -> Any:
        """A request as the writer process runs it: signature checked, routed, committed."""
        call = m.Call(0, req.raw_path, self.service.auth.verify_signature(req), message)
        return self.service.submit(actions.action(self.service, None, call)).result(10)

    def put(self, name: str, data: bytes, policy: Policy | None = None) -> Any:
        return self.run(self.request("PUT", f"/v1/deposits/{name}"), m.PutDeposit(name, data, policy))

    def get(self, name: str, req: SignedRequest | None = None) -> bytes:
        req = req or self.request("GET", f"/v1/deposits/{name}")
        return bytes(self.run(req, m.GetDeposit(name, None, None))["data"])


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    data = DataDir(tmp_path / "data")
    init = init_server(data, PASSPHRASE)
    store = storage.Store(data.load_config().db_url)
    bar = barrier.Barrier()
    with store.exclusive() as tx:
        bar.open_with(tx, barrier.Unlock(PASSPHRASE), int(repo.get_meta(tx, "seal_epoch") or "1"))
    clock = Clock()
    service = Service(store, bar, data, data.load_config(), clock=clock)
    identity = Identity.generate()
    pub = identity.public_bytes()
    register = service.registration.action(init.org, secret_hash(init.auth_secret), "host", pub, "127.0.0.1")
    reg = service.submit(register).result(10)
    try:
        yield Host(service, clock, identity, reg["client_id"], (init.org, init.auth_secret))
    finally:
        store.dispose()


def test_expiry_takes_effect_at_its_second(host: Host) -> None:
    host.put("k", b"v", Policy(expires_at=START + 60))
    host.clock.now = START + 59.9
    assert host.get("k") == b"v"
    host.clock.now = START + 60
    with pytest.raises(Gone):
        host.get("k")


def test_not_before_holds_until_its_second(host: Host) -> None:
    host.put("k", b"v", Policy(not_before=START + 3600))
    host.clock.now = START + 3599
    with pytest.raises(Denied, match="not retrievable before"):
        host.get("k")
    host.clock.now = START + 3600
    assert host.get("k") == b"v"


def test_request_window_and_replay(host: Host) -> None:
    host.put("k", b"v")
    skew = reqsig.MAX_SKEW_SECONDS
    with pytest.raises(Unauthorized, match="off the server's clock"):
        host.get("k", host.request("GET", "/v1/deposits/k", at=START - skew - 1))
    with pytest.raises(Unauthorized, match="off the server's clock"):
        host.get("k", host.request("GET", "/v1/deposits/k", at=START + skew + 1))
    early = host.request("GET", "/v1/deposits/k", at=START - skew)
    assert host.get("k", early) == b"v"  # at the window's edge: accepted
    with pytest.raises(Unauthorized):
        host.get("k", early)  # the same request again: a replay
    host.clock.now = START + 2 * skew  # the server's clock moved on: the old request is outside
    with pytest.raises(Unauthorized, match="off the server's clock"):
        host.get("k", host.request("GET", "/v1/deposits/k", at=START))
