"""Tokens through the Vault-compatible API, in-process with the clock injected: TTL and renewal
at their edges, uses, revocation of a token and its children, child policies no wider than the
parent's, the client's status, every call audited without the token or any secret."""

from __future__ import annotations

import json
from typing import Any

import pytest

from strongroom.server import repository as repo
from strongroom.server import vault_rows
from strongroom.server.ctx import Ctx
from strongroom.server.repository import ClientRow
from tests.server.test_clock import START, Host, host  # noqa: F401 - the fixture
from tests.server.vault.inproc import Vault

pytestmark = pytest.mark.unit


@pytest.fixture
def vault(host: Host) -> Vault:  # noqa: F811
    return Vault(host)


def test_a_token_lives_for_its_ttl_and_renews_within_its_max(vault: Vault) -> None:
    token = vault.login(ttl="1h", explicit_max_ttl="2h")
    look = vault.call("GET", "auth/token/lookup-self", token)
    assert look.status == 200 and look.data["ttl"] == 3600 and look.data["id"] == token
    assert look.data["policies"] == ["default"]
    vault.host.clock.now = START + 3599
    assert vault.call("GET", "auth/token/lookup-self", token).status == 200
    renewed = vault.call("POST", "auth/token/renew-self", token, {"increment": "1h"})
    assert renewed.status == 200 and renewed.body["auth"]["lease_duration"] == 3600
    vault.host.clock.now = START + 7000
    again = vault.call("POST", "auth/token/renew-self", token, {"increment": "1h"})
    assert again.body["auth"]["lease_duration"] == 200  # capped by explicit_max_ttl
    vault.host.clock.now = START + 7200
    gone = vault.call("GET", "auth/token/lookup-self", token)
    assert (gone.status, gone.body) == (403, {"errors": ["permission denied"]})


def test_uses_are_counted_and_the_last_one_ends_the_token(vault: Vault) -> None:
    token = vault.login(num_uses=2)
    assert vault.call("GET", "auth/token/lookup-self", token).data["num_uses"] == 1  # this call was one
    assert vault.call("GET", "auth/token/lookup-self", token).status == 200
    assert vault.call("GET", "auth/token/lookup-self", token).status == 403


def test_revoking_a_token_revokes_its_children(vault: Vault) -> None:
    parent = vault.login(policies=["root"])
    child = vault.call("POST", "auth/token/create", parent, {"ttl": "10m"}).body["auth"]["client_token"]
    grandchild = vault.call("POST", "auth/token/create", child, {}).body["auth"]["client_token"]
    assert vault.call("GET", "auth/token/lookup-self", grandchild).status == 200
    assert vault.call("POST", "auth/token/revoke-self", parent).status == 204
    for t in (parent, child, grandchild):
        assert vault.call("GET", "auth/token/lookup-self", t).status == 403


def test_children_are_no_wider_than_their_parent(vault: Vault) -> None:
    admin = vault.login(policies=["root"])  # the host's own tokens, but only admins write policies
    r = vault.call("POST", "sys/policies/acl/reader", admin, {"policy": 'path "secret/data/*" { capabilities = ["read"] }'})
    assert r.status == 403  # the host is not the admin credential
    with vault.host.service.store.exclusive() as tx:
        vault_rows.put_policy(
            tx,
            "reader",
            'path "secret/data/*" { capabilities = ["read"] }\npath "auth/token/create" { capabilities = ["update"] }',
            START,
        )
    reader = vault.login(policies=["reader"], ttl="1h")
    wider = vault.call("POST", "auth/token/create", reader, {"policies": ["root"]})
    assert wider.status == 400 and "subset" in wider.body["errors"][0]
    child = vault.call("POST", "auth/token/create", reader, {"policies": ["reader"], "ttl": "5h"})
    assert child.status == 200 and child.body["auth"]["lease_duration"] == 5 * 3600  # as OpenBao reports it
    child_token = child.body["auth"]["client_token"]
    vault.host.clock.now = START + 3599
    assert vault.call("GET", "secret/data/x", child_token).status == 404  # allowed, nothing there
    vault.host.clock.now = START + 3600  # the parent expires: the child dies with it
    assert vault.call("GET", "secret/data/x", child_token).status == 403
    vault.host.clock.now = START
    assert vault.call("POST", "auth/token/create", reader, {"policies": ["nope"]}).status == 400


def test_a_disabled_client_s_tokens_are_refused_and_a_revoked_client_s_are_gone(vault: Vault) -> None:
    token = vault.login()
    service, client_id = vault.host.service, vault.host.client_id
    with service.store.exclusive() as tx:
        repo.set_client_status(tx, client_id, "disabled")
    assert vault.call("GET", "auth/token/lookup-self", token).status == 403
    with service.store.exclusive() as tx:
        repo.set_client_status(tx, client_id, "active")
    assert vault.call("GET", "auth/token/lookup-self", token).status == 200
    admin = ClientRow("c_admin0000000000000", None, "admin", "admin", "active", b"")

    def revoke(tx: Any, aw: Any) -> Any:
        return service.orgs.set_client_status(Ctx(tx, admin, aw), client_id, "revoked")

    service.submit(revoke).result(10)
    assert vault.call("GET", "auth/token/lookup-self", token).status == 403
    with service.store.snapshot() as tx:
        assert vault_rows.count_tokens(tx, client_id) == 0  # deleted, not merely refused


def test_policies_decide_each_call(vault: Vault) -> None:
    with vault.host.service.store.exclusive() as tx:
        vault_rows.put_policy(
            tx,
            "app",
            'path "secret/data/app/*" { capabilities = ["create", "read"] }\n'
            'path "secret/data/app/locked" { capabilities = ["deny"] }',
            START,
        )
    token = vault.login(policies=["app"])
    assert vault.call("POST", "secret/data/app/db", token, {"data": {"pw": "1"}}).status == 200  # create
    assert vault.call("POST", "secret/data/app/db", token, {"data": {"pw": "2"}}).status == 403  # update not granted
    assert vault.call("GET", "secret/data/app/db", token).data["data"] == {"pw": "1"}
    assert vault.call("POST", "secret/data/app/locked", token, {"data": {"a": "b"}}).status == 403
    assert vault.call("POST", "secret/data/other", token, {"data": {"a": "b"}}).status == 403
    assert vault.call("LIST", "secret/metadata", token).status == 403
    caps = vault.call("POST", "sys/capabilities-self", token, {"paths": ["secret/data/app/x"]})
    assert caps.data["capabilities"] == ["create", "read"]


def test_every_call_is_audited_without_tokens_or_values(vault: Vault) -> None:
    token = vault.login(policies=["root"])
    vault.call("POST", "secret/data/s", token, {"data": {"password": "hunter2-secret"}})
    vault.call("GET", "secret/data/s", token)
    vault.call("GET", "secret/data/s", "sr.not-a-token")
    ct = vault.call("POST", "transit/encrypt/k", token, {"plaintext": "c2VjcmV0LXBsYWludGV4dA=="}).data["ciphertext"]
    vault.call("POST", "transit/decrypt/k", token, {"ciphertext": ct})
    with vault.host.service.store.snapshot() as tx:
        rows = repo.all_audit(tx)
    text = json.dumps([list(map(str, r)) for r in rows])
    actions = [r[3] for r in rows]
    for expected in (
        "vault.login",
        "vault.kv.write",
        "vault.kv.read",
        "vault.auth",
        "vault.transit.create",
        "vault.transit.encrypt",
        "vault.transit.decrypt",
    ):
        assert expected in actions, actions
    for secret in (token, "hunter2-secret", "c2VjcmV0LXBsYWludGV4dA==", "secret-plaintext", ct):
        assert secret not in text


def test_another_clients_token_is_a_bad_token_to_every_token_route(vault: Vault) -> None:
    """Tokens are looked up among the caller's own client's: a root-policy token of client B
    learns nothing of client A's tokens and cannot renew or revoke them (each client is its own
    tenant; OpenBao has one)."""
    mine = vault.login(policies=["root"])
    child = vault.call("POST", "auth/token/create", mine, {"policies": ["default"], "ttl": "1h"}).body["auth"]
    other = Vault(vault.host.another("tenant-b"))
    theirs = other.login(policies=["root"])
    token, accessor = child["client_token"], child["accessor"]
    assert other.call("POST", "auth/token/lookup", theirs, {"token": token}).status == 403
    assert other.call("POST", "auth/token/lookup-accessor", theirs, {"accessor": accessor}).status == 400
    assert other.call("POST", "auth/token/renew", theirs, {"token": token}).status == 400
    assert other.call("POST", "auth/token/revoke", theirs, {"token": token}).status == 204  # as for any unknown token
    assert other.call("POST", "auth/token/revoke-accessor", theirs, {"accessor": accessor}).body["warnings"]
    assert other.call("POST", "auth/token/revoke-orphan", theirs, {"token": token}).status == 400
    assert accessor not in other.call("LIST", "auth/token/accessors", theirs).body["data"]["keys"]
    # and the token is untouched
    assert vault.call("GET", "auth/token/lookup-self", token).status == 200
    assert accessor in vault.call("LIST", "auth/token/accessors", mine).body["data"]["keys"]
