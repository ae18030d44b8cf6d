"""Policy: readers (clients and groups), no existence oracle, not-before, expiry, retrieval limits, audit."""

from __future__ import annotations

import time

import pytest

from strongroom.client import Denied, Gone, NotFound
from strongroom.client.errors import InvalidRequest
from tests.serverproc import Deployment


def _audit(d: Deployment, action: str) -> list[dict]:
    return [e for e in d.admin().audit_tail(-1, 1000) if e["action"] == action]


def test_shared_with_client_and_group(running: Deployment) -> None:
    owner, friend, member, stranger = (running.register(n) for n in ("owner", "friend", "member", "stranger"))
    admin = running.admin()
    admin.create_group("default", "dbhosts")
    admin.change_group("default", "dbhosts", add=[member.client_id])
    owner.put("k", b"secret", readers=[f"client:{friend.client_id}", "group:dbhosts"])
    assert friend.get("k", owner=owner.client_id) == b"secret"
    assert member.get("k", owner=owner.client_id) == b"secret"
    with pytest.raises(NotFound) as hidden:
        stranger.get("k", owner=owner.client_id)
    with pytest.raises(NotFound) as missing:
        stranger.get("no-such-deposit", owner=owner.client_id)
    assert str(hidden.value) == str(missing.value)  # no existence oracle
    assert [d["name"] for d in friend.list(shared=True)] == ["k"]
    assert stranger.list(shared=True) == []
    # removing the member from the group takes effect at once
    admin.change_group("default", "dbhosts", remove=[member.client_id])
    with pytest.raises(NotFound):
        member.get("k", owner=owner.client_id)
    # only the owner changes policy or deletes; others do not even see the deposit
    with pytest.raises(NotFound):
        friend.delete("k")
    owner.set_policy("k", readers=[])
    with pytest.raises(NotFound):
        friend.get("k", owner=owner.client_id)
    denials = [e for e in _audit(running, "get") if e["outcome"] == "denied"]
    assert len(denials) >= 4


def test_policy_readers_must_exist(running: Deployment) -> None:
    c = running.register()
    for bad in (["client:c_AAAAAAAAAAAAAAAA"], ["group:nope"], ["everyone"], ["client:../x"]):
        with pytest.raises(InvalidRequest):
            c.put("k", b"v", readers=bad)
    assert c.list() == []  # nothing was stored by the refused puts


def test_expiry_answers_410_and_is_audited(running: Deployment) -> None:
    c = running.register()
    c.put("short", b"v", expires_at=time.time() + 1.5)
    assert c.get("short") == b"v"
    time.sleep(2)
    with pytest.raises(Gone, match="expired"):
        c.get("short")
    assert any(e["outcome"] == "denied" and e["detail"].get("reason") == "expired" for e in _audit(running, "get"))


def test_not_before_answers_403(running: Deployment) -> None:
    c = running.register()
    c.put("later", b"v", not_before=time.time() + 3600)
    with pytest.raises(Denied, match="not retrievable before"):
        c.get("later")


def test_retrieval_limit(running: Deployment) -> None:
    owner, friend = running.register(), running.register()
    owner.put("once", b"v", readers=[f"client:{friend.client_id}"], max_retrievals=2)
    assert friend.get("once", owner=owner.client_id) == b"v"
    assert owner.get("once") == b"v"
    with pytest.raises(Gone, match="retrieval limit"):
        friend.get("once", owner=owner.client_id)
    assert owner.list()[0]["retrievals"] == 2
    # a new policy from the owner can lift the limit
    owner.set_policy("once", readers=[f"client:{friend.client_id}"], max_retrievals=5)
    assert friend.get("once", owner=owner.client_id) == b"v"


def test_groups_admin_only(running: Deployment) -> None:
    c = running.register()
    with pytest.raises(Denied):
        c.create_group("default", "mine")
    with pytest.raises(Denied):
        c.list_clients()
