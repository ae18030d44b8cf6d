"""KV v2 over deposits, in-process with the clock injected: versions, check-and-set, delete,
undelete and destroy as the deposit API sees them too, max_versions, delete_version_after,
metadata and listing."""

from __future__ import annotations

import pytest

from strongroom.server import messages as m
from strongroom.server.errors import NotFound
from tests.server.test_clock import START, Host, host  # noqa: F401 - the fixture
from tests.server.vault.inproc import Vault

pytestmark = pytest.mark.unit


@pytest.fixture
def vault(host: Host) -> tuple[Vault, str]:  # noqa: F811
    v = Vault(host)
    return v, v.login(policies=["root"])


def test_one_store_two_apis(vault: tuple[Vault, str]) -> None:
    v, t = vault
    assert v.call("POST", "secret/data/app", t, {"data": {"user": "db", "pw": "é"}}).data["version"] == 1
    assert v.host.get("app") == '{"user":"db","pw":"é"}'.encode()  # the deposit API's get: the same bytes
    v.host.put("app", b'{"pw":"from the deposit API"}')
    assert v.call("GET", "secret/data/app", t).data["data"] == {"pw": "from the deposit API"}
    v.host.put("raw", b"\x00not json")
    bad = v.call("GET", "secret/data/raw", t)
    assert bad.status == 400 and "not a JSON object" in bad.body["errors"][0]


def test_versions_and_check_and_set(vault: tuple[Vault, str]) -> None:
    v, t = vault
    assert v.call("POST", "secret/data/s", t, {"data": {"n": 1}, "options": {"cas": 1}}).status == 400
    assert v.call("POST", "secret/data/s", t, {"data": {"n": 1}, "options": {"cas": 0}}).status == 200
    r = v.call("POST", "secret/data/s", t, {"data": {"n": 2}, "options": {"cas": 0}})
    assert (r.status, r.body) == (400, {"errors": ["check-and-set parameter did not match the current version"]})
    assert v.call("PUT", "secret/data/s", t, {"data": {"n": 2}, "options": {"cas": 1}}).data["version"] == 2
    assert v.call("GET", "secret/data/s?version=1", t).data["data"] == {"n": 1}
    assert v.call("GET", "secret/data/s", t).data["metadata"]["version"] == 2
    assert v.call("GET", "secret/data/s?version=9", t).status == 404
    assert v.call("PATCH", "secret/data/s", t, {"data": {"m": 3, "n": None}}).data["version"] == 3
    assert v.call("GET", "secret/data/s", t).data["data"] == {"m": 3}
    assert v.call("POST", "secret/metadata/s", t, {"cas_required": True}).status == 204
    assert v.call("POST", "secret/data/s", t, {"data": {"n": 4}}).body == {
        "errors": ["check-and-set parameter required for this call"]
    }


def test_delete_undelete_destroy_hold_for_both_apis(vault: tuple[Vault, str]) -> None:
    v, t = vault
    for n in (1, 2, 3):
        v.call("POST", "secret/data/d", t, {"data": {"n": n}})
    assert v.call("DELETE", "secret/data/d", t).status == 204  # the latest version
    r = v.call("GET", "secret/data/d", t)
    assert r.status == 404 and r.data["data"] is None and r.data["metadata"]["deletion_time"] != ""
    with pytest.raises(NotFound, match="deleted"):
        v.host.get("d")
    assert v.call("POST", "secret/undelete/d", t, {"versions": [3]}).status == 204
    assert v.call("GET", "secret/data/d", t).data["data"] == {"n": 3}
    assert v.host.get("d") == b'{"n":3}'
    assert v.call("POST", "secret/destroy/d", t, {"versions": [3, 1]}).status == 204
    r = v.call("GET", "secret/data/d", t)
    assert r.status == 404 and r.data["metadata"]["destroyed"] is True
    assert v.call("POST", "secret/undelete/d", t, {"versions": [3]}).status == 204  # nothing to bring back
    assert v.call("GET", "secret/data/d", t).status == 404
    with pytest.raises(NotFound, match="destroyed"):
        v.host.get("d")
    assert v.call("GET", "secret/data/d?version=2", t).data["data"] == {"n": 2}
    meta = v.call("GET", "secret/metadata/d", t).data
    assert {k: (m["destroyed"], m["deletion_time"] != "") for k, m in meta["versions"].items()} == {
        "1": (True, False),
        "2": (False, False),
        "3": (True, False),
    }
    assert v.call("POST", "secret/delete/d", t, {"versions": "x"}).status == 400
    assert v.call("POST", "secret/delete/d", t, {}).body == {"errors": ["no version number provided"]}
    assert v.call("DELETE", "secret/metadata/d", t).status == 204
    assert v.call("GET", "secret/metadata/d", t).status == 404
    with pytest.raises(NotFound):
        v.host.get("d")


def test_max_versions_prunes_the_oldest(vault: tuple[Vault, str]) -> None:
    v, t = vault
    v.call("POST", "secret/data/m", t, {"data": {"n": 0}})
    assert v.call("POST", "secret/metadata/m", t, {"max_versions": 2, "custom_metadata": {"owner": "ops"}}).status == 204
    for n in (1, 2, 3):
        v.call("POST", "secret/data/m", t, {"data": {"n": n}})
    meta = v.call("GET", "secret/metadata/m", t).data
    assert sorted(meta["versions"]) == ["3", "4"] and meta["oldest_version"] == 3 and meta["current_version"] == 4
    assert meta["custom_metadata"] == {"owner": "ops"} and meta["max_versions"] == 2
    assert v.call("GET", "secret/data/m?version=2", t).status == 404
    assert v.call("PATCH", "secret/metadata/m", t, {"custom_metadata": {"team": "db"}}).status == 204
    assert v.call("GET", "secret/metadata/m", t).data["custom_metadata"] == {"owner": "ops", "team": "db"}


def test_delete_version_after_takes_effect_at_its_second(vault: tuple[Vault, str]) -> None:
    v, t = vault
    v.call("POST", "secret/data/e", t, {"data": {"n": 1}})
    assert v.call("POST", "secret/metadata/e", t, {"delete_version_after": "1h"}).status == 204
    v.call("POST", "secret/data/e", t, {"data": {"n": 2}})  # written while it is set: stamped
    v.host.clock.now = START + 3599
    assert v.call("GET", "secret/data/e", t).status == 200
    v.host.clock.now = START + 3600
    assert v.call("GET", "secret/data/e", t).status == 404
    with pytest.raises(NotFound, match="deleted"):
        v.host.get("e")
    # the version written before it was set is left alone, as OpenBao leaves it
    assert v.call("GET", "secret/data/e?version=1", t).status == 200
    assert v.call("GET", "secret/metadata/e", t).data["delete_version_after"] == "1h0m0s"


def test_listing_folders_and_keys(vault: tuple[Vault, str]) -> None:
    v, t = vault
    for p in ("a", "team/db", "team/web", "team/sub/x", "Team2"):
        v.call("POST", f"secret/data/{p}", t, {"data": {"k": "v"}})
    assert v.call("LIST", "secret/metadata", t).data["keys"] == ["Team2", "a", "team/"]
    assert v.call("GET", "secret/metadata/team?list=true", t).data["keys"] == ["db", "sub/", "web"]
    assert v.call("LIST", "secret/metadata/team/", t).data["keys"] == ["db", "sub/", "web"]
    assert v.call("LIST", "secret/metadata/nothing", t).status == 404
    assert v.call("GET", "secret/data/bad path", t).status == 400
    assert v.call("POST", "secret/data/a//b", t, {"data": {}}).status == 400


def test_metadata_before_data_is_a_deposit_with_no_version(vault: tuple[Vault, str]) -> None:
    v, t = vault
    assert v.call("POST", "secret/metadata/later", t, {"max_versions": 2}).status == 204
    with pytest.raises(NotFound, match="no version 0"):
        v.host.get("later")  # the deposit API finds the deposit and no version of it
    listed = v.host.run(v.host.request("GET", "/v1/deposits"), m.ListDeposits(False))
    assert [d["latest_version"] for d in listed if d["name"] == "later"] == [0]
    assert v.call("POST", "secret/data/later", t, {"data": {"k": "v"}}).body["data"]["version"] == 1
    assert v.host.get("later") == b'{"k":"v"}'
