"""Every Vault route that answers leaves an audit entry (issue 37, point 15): the test walks the
route table, calls each authenticated route with a root token on a secret and a key that exist,
and fails on any route that answered 2xx without adding an entry to the chain (sys/mounts,
sys/internal/ui/mounts, sys/capabilities-self and secret/config wrote none before)."""

from __future__ import annotations

import base64
import re

import pytest

from tests.server.test_clock import Host, host  # noqa: F401 - the fixture
from tests.server.vault.inproc import Vault

pytestmark = pytest.mark.unit


def _last_seq(v: Vault) -> int:
    with v.host.service.store.snapshot() as tx:
        return int(tx.value("SELECT MAX(seq) FROM audit") or 0)


def test_every_route_that_answers_is_audited(host: Host) -> None:  # noqa: F811
    v = Vault(host)
    t = v.login(policies=["root"])
    assert v.call("POST", "secret/data/walk", t, {"data": {"a": "1"}}).status == 200
    assert v.call("POST", "transit/keys/walk", t).status in (200, 204)
    ct = v.call("POST", "transit/encrypt/walk", t, {"plaintext": base64.b64encode(b"x").decode()}).data["ciphertext"]
    b64 = base64.b64encode(b"x").decode()
    bodies = {  # a body each kind of write accepts, by the start of its path
        "secret/data/": {"data": {"a": "2"}},
        "secret/metadata/": {"max_versions": 5},
        "secret/delete/": {"versions": [1]},
        "secret/undelete/": {"versions": [1]},
        "secret/destroy/": {"versions": [1]},
        "transit/": {"plaintext": b64, "ciphertext": ct, "input": b64},
        "auth/token/create": {"ttl": "1m"},
        "sys/capabilities-self": {"paths": ["secret/data/walk"]},
    }
    answered, silent = [], []
    routes = [r for r in v.front.engine.routes if r.authenticated and not r.signed and not r.template.endswith("revoke-self")]
    for route in sorted(routes, key=lambda r: r.method == "DELETE"):  # the deletions last
        path = re.sub(r"\{[^}]*\}", "walk", route.template)
        body = (
            next((b for start, b in bodies.items() if path.startswith(start)), {}) if route.method in ("POST", "PATCH") else None
        )
        before = _last_seq(v)
        r = v.call(route.method, path, t, body)
        if 200 <= r.status < 300:
            answered.append(f"{route.method} {route.template}")
            if _last_seq(v) == before:
                silent.append(f"{route.method} {route.template}")
    assert not silent, silent
    assert len(answered) >= 30, (len(answered), answered)  # the walk reached most of the table (34 of 47)
    for needed in ("GET sys/mounts", "GET sys/internal/ui/mounts", "POST sys/capabilities-self"):
        assert needed in answered, (needed, answered)
