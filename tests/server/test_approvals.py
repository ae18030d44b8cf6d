"""M-of-N release approval: a deposit released only after M of its named trustees approve;
one release per approval even when requesters race on two servers on PostgreSQL; denials,
windows, expiry, an approval for another deposit, every step audited."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from strongroom.client import ApprovalRequired, Client, Denied, Gone, InvalidRequest, NotFound, StrongroomError
from strongroom.server import storage
from tests.serverproc import Deployment, cli


def _pending(c: Client, name: str, owner: str | None = None) -> str:
    with pytest.raises(ApprovalRequired) as e:
        c.get(name, owner=owner)
    assert e.value.request_id.startswith("apr_") and e.value.request_id in str(e.value)
    return e.value.request_id


def test_two_of_three_trustees_release_once(running: Deployment) -> None:
    owner, app = running.register("owner"), running.register("app")
    t1, t2, t3 = (running.register(f"trustee{i}") for i in range(3))
    trustees = [f"client:{t.client_id}" for t in (t1, t2, t3)]
    owner.put("vol-key", b"k" * 32, readers=[f"client:{app.client_id}"], approvers=trustees, approvals_required=2)
    first = _pending(app, "vol-key", owner.client_id)
    assert _pending(app, "vol-key", owner.client_id) == first  # one pending request per requester
    with pytest.raises(Denied, match="not an approver"):
        app.approve(first)
    with pytest.raises(NotFound):
        t1.approve("apr_" + "A" * 20)
    out = t1.approve(first)
    assert (out["state"], out["approvals"], out["required"]) == ("pending", [t1.client_id], 2)
    with pytest.raises(InvalidRequest, match="already"):
        t1.approve(first)
    assert [r["id"] for r in t3.approvals()] == [first]
    assert t2.approve(first)["state"] == "approved"
    assert app.get("vol-key", owner=owner.client_id) == b"k" * 32
    second = _pending(app, "vol-key", owner.client_id)  # that approval released once
    assert second != first
    with pytest.raises(Gone, match="approved|used"):
        t3.approve(first)
    assert t3.deny(second)["state"] == "denied"
    with pytest.raises(Gone, match="denied"):
        t1.approve(second)
    third = _pending(owner, "vol-key")  # the owner too needs its trustees
    assert third not in (first, second)
    actions = [(e["action"], e["outcome"]) for e in running.admin().audit_tail(-1, 1000) if e["action"].startswith("approval.")]
    assert actions.count(("approval.approve", "ok")) == 2 and ("approval.deny", "ok") in actions
    gets = [e for e in running.admin().audit_tail(-1, 1000) if e["action"] == "get" and e["outcome"] == "ok"]
    assert gets[-1]["detail"]["approval"] == first


def test_groups_windows_and_an_approval_for_another_deposit(running: Deployment) -> None:
    owner, app, member, outsider = (running.register(n) for n in ("owner", "app", "member", "outsider"))
    admin = running.admin()
    admin.create_group(running.org, "trustees")
    admin.change_group(running.org, "trustees", add=[member.client_id])
    reader = [f"client:{app.client_id}"]
    owner.put("a", b"A", readers=reader, approvers=["group:trustees"], approvals_required=1, approval_window=60)
    owner.put("b", b"B", readers=[f"client:{app.client_id}"], approvers=[f"client:{outsider.client_id}"], approvals_required=1)
    req_a, req_b = _pending(app, "a", owner.client_id), _pending(app, "b", owner.client_id)
    with pytest.raises(Denied, match="not an approver"):
        member.approve(req_b)  # a trustee of deposit a cannot release deposit b
    with pytest.raises(Denied, match="not an approver"):
        outsider.approve(req_a)
    member.approve(req_a)
    assert [app.get("a", owner=owner.client_id) for _ in range(3)] == [b"A"] * 3  # the window
    owner.set_policy("a", readers=[f"client:{app.client_id}"], approvers=["group:trustees"], approvals_required=1)
    _pending(app, "a", owner.client_id)  # a policy change cancels what was approved
    with pytest.raises(InvalidRequest, match="only 1 approvers"):
        owner.set_policy("b", approvers=[f"client:{outsider.client_id}"], approvals_required=2)
    with pytest.raises(InvalidRequest, match="needs approvers"):
        owner.set_policy("b", approvals_required=1)


def test_an_expired_request_cannot_be_approved(running: Deployment) -> None:
    owner, trustee = running.register("owner"), running.register("trustee")
    owner.put("k", b"v", approvers=[f"client:{trustee.client_id}"], approvals_required=1)
    req = _pending(owner, "k")
    store = storage.Store(running.db_url)
    with store.exclusive() as tx:
        tx.run("UPDATE approval_requests SET expires = 1 WHERE id = ?", req)
    store.dispose()
    with pytest.raises(Gone, match="expired"):
        trustee.approve(req)
    assert _pending(owner, "k") != req


@pytest.mark.parametrize("rounds", [4])
def test_racing_requesters_on_two_servers_release_once(pg_deployment: Deployment, rounds: int) -> None:
    d = pg_deployment
    s1, s2 = d.start(workers=2), d.start(workers=2)
    owner = d.register("owner", server=s1)
    trustee = d.register("trustee", server=s1)
    owner.put("vol-key", b"secret", approvers=[f"client:{trustee.client_id}"], approvals_required=1)
    for _ in range(rounds):
        req = _pending(owner, "vol-key")
        trustee.approve(req)
        released, refused, other = [], [], []
        start = threading.Barrier(12)

        def race(url: str, released: list[bytes] = released, refused: list[int] = refused, other: list[str] = other) -> None:
            with Client([url], owner.client_id, owner._identity, d.data.ca_file) as c:
                start.wait()  # noqa: B023 - this round's barrier
                try:
                    released.append(c.get("vol-key"))
                except ApprovalRequired:
                    refused.append(1)
                except StrongroomError as e:
                    other.append(repr(e))

        threads = [threading.Thread(target=race, args=(s.url,)) for s in (s1, s2) * 6]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert (len(released), len(refused), other) == (1, 11, []), other
    uses = [e for e in d.admin().audit_tail(-1, 1000) if e["action"] == "get" and e["outcome"] == "ok"]
    assert len(uses) == rounds and len({e["detail"]["approval"] for e in uses}) == rounds


def test_cli_approve_flow(running: Deployment, tmp_path: Path) -> None:
    def register(name: str) -> Path:
        prof = tmp_path / name
        r = cli("register", "--server", running.url, "--ca", str(running.data.ca_file), "--org", running.org,
                "--auth-secret", running.secret, "--profile", str(prof), "--name", name)  # fmt: skip
        assert r.returncode == 0, r.stderr
        return prof

    owner, trustee = register("owner"), register("trustee")
    trustee_id = json.loads((trustee / "profile.json").read_text())["client_id"]
    r = cli("put", "k", "-", "--profile", str(owner), "--approver", f"client:{trustee_id}", "--approvals-required", "1",
            input=b"v")  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = cli("get", "k", "--profile", str(owner))
    assert r.returncode == 1 and b"ApprovalRequired:" in r.stderr and b"request apr_" in r.stderr
    req = r.stderr.decode().split("request ")[1].split()[0]
    r = cli("approvals", "--profile", str(trustee))
    assert req.encode() in r.stdout and b"pending" in r.stdout
    r = cli("approve", req, "--profile", str(trustee))
    assert r.returncode == 0 and b"approved (1 of 1 approvals)" in r.stdout, r.stderr
    assert cli("get", "k", "--profile", str(owner)).stdout == b"v"
