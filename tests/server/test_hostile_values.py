"""Values that are legal JSON but hostile (issue 37, points 6 and 7): a KV PATCH whose options are
not an object, a value nested ~970 levels deep (stored before, then every read answered 500), an
object of more entries than OpenBao takes, and NUL characters in text fields (a 500 on
PostgreSQL, kept on SQLite): each answers 4xx at write time, and nothing is stored."""

from __future__ import annotations

import pytest

from tests.server.test_clock import Host, host  # noqa: F401 - the fixture
from tests.server.vault.inproc import Vault

pytestmark = pytest.mark.unit


@pytest.fixture
def vault(host: Host) -> tuple[Vault, str]:  # noqa: F811
    v = Vault(host)
    return v, v.login(policies=["root"])


def _nested(depth: int) -> str:
    """JSON text of objects nested ``depth`` deep (json.dumps itself would recurse too deep)."""
    return '{"k":' * depth + '"leaf"' + "}" * depth


def _body(field: str, value: str) -> bytes:
    return ('{"data":{"' + field + '":' + value + "}}").encode()


def _refused(r: object) -> None:
    status, body = r.status, r.body  # type: ignore[attr-defined]
    assert 400 <= status < 500 and body.get("errors"), (status, body)


def test_patch_options_must_be_an_object(vault: tuple[Vault, str]) -> None:
    v, t = vault
    assert v.call("POST", "secret/data/app", t, {"data": {"a": "1"}}).status == 200
    for options in ("x", 5, [1]):
        _refused(v.call("PATCH", "secret/data/app", t, {"data": {"b": "2"}, "options": options}))
    assert v.call("GET", "secret/data/app", t).data["data"] == {"a": "1"}


def test_deep_and_wide_values_are_refused_at_write_and_the_secret_still_reads(vault: tuple[Vault, str]) -> None:
    v, t = vault
    assert v.call("POST", "secret/data/app", t, {"data": {"a": "1"}}).status == 200
    _refused(v.call("POST", "secret/data/app", t, _body("deep", _nested(970))))
    _refused(v.call("POST", "secret/data/app", t, {"data": {"wide": list(range(10_001))}}))
    _refused(v.call("PATCH", "secret/data/app", t, _body("deep", _nested(400))))
    assert v.call("POST", "secret/data/ok", t, _body("deep", _nested(250))).status == 200  # within the bound
    assert v.call("GET", "secret/data/ok", t).status == 200
    assert v.call("GET", "secret/data/app", t).data["data"] == {"a": "1"}  # nothing stored, still readable


def test_a_deep_value_written_through_the_deposit_api_reads_as_4xx_not_500(vault: tuple[Vault, str]) -> None:
    v, t = vault
    v.host.put("nested", _nested(970).encode())
    _refused(v.call("GET", "secret/data/nested", t))


def test_nul_in_text_fields_is_refused(vault: tuple[Vault, str]) -> None:
    v, t = vault
    assert v.call("POST", "secret/data/app", t, {"data": {"a": "NUL \x00 inside a secret's value is kept"}}).status == 200
    cases = [
        v.call("POST", "auth/token/create", t, {"display_name": "a\x00b"}),
        v.call("POST", "auth/token/create", t, {"policies": ["p\x00"]}),
        v.call("POST", "auth/token/create", t, {"meta": {"k": "v\x00"}}),
        v.call("POST", "sys/policy/p%00q", t, {"policy": 'path "x" { capabilities = ["read"] }'}),
        v.call("POST", "sys/policy/p", t, {"policy": 'path "x\x00" { capabilities = ["read"] }'}),
        v.call("GET", "secret/data/app?version=1&x=%00", t),
        v.call("POST", "secret/metadata/app", t, {"custom_metadata": {"owner": "a\x00"}}),
    ]
    for r in cases:
        _refused(r)
    assert v.call("GET", "secret/data/app", t).data["data"] == {"a": "NUL \x00 inside a secret's value is kept"}
    assert v.call("GET", "sys/policy/p", t).status == 404  # nothing stored
