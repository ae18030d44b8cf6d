"""Numbers in requests are ASCII digits only (issue 37, point 5): "²" passes str.isdigit() but not
int() (a 500 before), "٣" and fullwidth "３" pass both (silently read as 3 before), and \\d in a
pattern matched them all.  Each place a request carries a number answers 4xx for them."""

from __future__ import annotations

import base64
import dataclasses

import pytest

from strongroom.crypto import reqsig
from strongroom.server.errors import Unauthorized
from tests.server.test_clock import Host, host  # noqa: F401 - the fixture
from tests.server.vault.inproc import Vault

pytestmark = pytest.mark.unit

ODD = ["²", "٣", "３", "1²", "٣٠٠"]  # superscript, Arabic-Indic, fullwidth, mixed


@pytest.fixture
def vault(host: Host) -> tuple[Vault, str]:  # noqa: F811
    v = Vault(host)
    return v, v.login(policies=["root"])


@pytest.mark.parametrize("digits", ODD)
def test_the_signed_request_timestamp(host: Host, digits: str) -> None:  # noqa: F811
    """Before authentication: the timestamp header, even one that int() reads as the right time."""
    now = str(int(host.clock.now))
    odd = now[: -len(digits)] + digits if digits.isdecimal() else digits
    req = host.request("GET", "/v1/deposits")
    req = dataclasses.replace(req, headers={**req.headers, reqsig.HEADER_TIME: odd})
    with pytest.raises(Unauthorized, match="malformed"):
        host.service.auth.verify_signature(req)


@pytest.mark.parametrize("digits", ODD)
def test_vault_numbers_in_queries_and_bodies(vault: tuple[Vault, str], digits: str) -> None:
    v, t = vault
    assert v.call("POST", "secret/data/app", t, {"data": {"a": "1"}}).status == 200
    assert v.call("POST", "transit/keys/k", t).status in (200, 204)
    ct = v.call("POST", "transit/encrypt/k", t, {"plaintext": base64.b64encode(b"x").decode()}).data["ciphertext"]
    cases = [
        v.call("GET", f"sys/health?activecode={digits}"),
        v.call("GET", f"secret/data/app?version={digits}", t),
        v.call("POST", "secret/destroy/app", t, {"versions": [digits]}),
        v.call("POST", "secret/metadata/app", t, {"delete_version_after": f"{digits}s"}),
        v.call("POST", "transit/encrypt/k", t, {"plaintext": "eA==", "key_version": digits}),
        v.call("POST", "transit/decrypt/k", t, {"ciphertext": ct.replace("vault:v1:", f"vault:v{digits}:")}),
    ]
    for r in cases:
        assert 400 <= r.status < 500 and r.body.get("errors"), (r.status, r.body)
    assert v.call("GET", "secret/data/app?version=1", t).status == 200  # ASCII still works
