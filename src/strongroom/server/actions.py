"""The router: each message (messages.py) to the group-commit action that serves it, in the
writer process.

A signed message is authenticated first (the signature was checked in the worker; the nonce is
recorded and the client's status read here, in the transaction), then handed to its backend
method with the caller's context; admin messages also need the admin role.  What must happen in
the writer once the batch committed (sealing its barrier, loading a new master key) is ``after``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strongroom.server import audit
from strongroom.server import messages as m
from strongroom.server.audit import AuditWriter
from strongroom.server.ctx import Ctx
from strongroom.server.errors import Unauthorized
from strongroom.server.kmip import certs as kmip_certs
from strongroom.server.kmip.ops import Engine as KmipEngine
from strongroom.server.service import Service
from strongroom.server.storage import Tx
from strongroom.server.vault.http import VaultEngine

Action = Callable[[Tx, AuditWriter], Any]
Backend = Callable[[Service, Ctx, Any], Any]

# message class -> (the backend call, whether it needs the admin role)
SIGNED: dict[type[Any], tuple[Backend, bool]] = {
    m.Authenticate: (lambda s, ctx, msg: None, False),
    m.WhoAmI: (lambda s, ctx, msg: s.whoami(ctx), False),
    m.PutDeposit: (lambda s, ctx, msg: s.deposits.put(ctx, msg.name, msg.data, msg.policy), False),
    m.GetDeposit: (lambda s, ctx, msg: s.deposits.get(ctx, msg.name, msg.owner, msg.version), False),
    m.ListDeposits: (lambda s, ctx, msg: s.deposits.list_deposits(ctx, msg.shared), False),
    m.DeleteDeposit: (lambda s, ctx, msg: s.deposits.delete(ctx, msg.name), False),
    m.SetPolicy: (lambda s, ctx, msg: s.deposits.set_policy(ctx, msg.name, msg.policy), False),
    m.ListApprovals: (lambda s, ctx, msg: s.deposits.approvals.listing(ctx), False),
    m.VoteApproval: (lambda s, ctx, msg: s.deposits.approvals.vote(ctx, msg.request_id, msg.approve), False),
    m.RecordEvents: (lambda s, ctx, msg: s.deposits.record_acl_denials(ctx, msg.acl_denials), False),
    m.Seal: (lambda s, ctx, msg: s.sealing.seal(ctx), True),
    m.RotateMasterKey: (lambda s, ctx, msg: s.sealing.rotate_master_key(ctx), True),
    m.RotateTang: (lambda s, ctx, msg: s.tang.rotate(ctx), True),
    m.CreateAdmin: (lambda s, ctx, msg: s.orgs.create_admin(ctx, msg.name, msg.public_key), True),
    m.CreateOrg: (lambda s, ctx, msg: s.orgs.create_org(ctx, msg.name), True),
    m.ListOrgs: (lambda s, ctx, msg: s.orgs.list_orgs(ctx), True),
    m.RotateOrgSecret: (lambda s, ctx, msg: s.orgs.rotate_org_secret(ctx, msg.org), True),
    m.ListClients: (lambda s, ctx, msg: s.orgs.list_clients(ctx), True),
    m.SetClientStatus: (lambda s, ctx, msg: s.orgs.set_client_status(ctx, msg.client_id, msg.status), True),
    m.ListGroups: (lambda s, ctx, msg: s.orgs.list_groups(ctx, msg.org), True),
    m.CreateGroup: (lambda s, ctx, msg: s.orgs.create_group(ctx, msg.org, msg.name), True),
    m.ChangeGroup: (lambda s, ctx, msg: s.orgs.change_group(ctx, msg.org, msg.name, msg.add, msg.remove), True),
    m.DeleteGroup: (lambda s, ctx, msg: s.orgs.delete_group(ctx, msg.org, msg.name), True),
    m.IssueKmipCert: (lambda s, ctx, msg: kmip_certs.issue(s.datadir.tls, ctx, msg.csr, msg.days), False),
    m.AuditTail: (lambda s, ctx, msg: audit.tail(ctx.tx, ctx.audit, msg.after, msg.limit), True),
}

# What the writer does after a message's batch committed (it succeeded).
AFTER: dict[type[Any], Callable[[Service], None]] = {
    m.Seal: lambda s: s.barrier.seal(),
    m.RotateMasterKey: lambda s: s.sealing.after_rotation(),
}


def action(service: Service, vault: VaultEngine | None, call: m.Call, kmip: KmipEngine | None = None) -> Action:
    """The group-commit action for one request; ValueError for a message no route sends."""
    msg = call.body
    if isinstance(msg, m.Register):  # not signed: the organization's auth secret is the credential
        return service.registration.action(msg.org, msg.secret_digest, msg.name, msg.public_key, msg.source)
    if isinstance(msg, m.TangRequest):  # not signed: Tang's protocol has no client authentication
        return service.tang.action(msg.kind, msg.kid, msg.body, msg.source)
    if isinstance(msg, m.VaultRequest) and vault is not None:  # a token's request, or a login's checked signature
        return vault.action(call.raw_path, msg, call.checked)
    if isinstance(msg, m.KmipRequest) and kmip is not None:  # authenticated by its TLS client certificate
        return kmip.action(msg)
    spec = SIGNED.get(type(msg))
    if spec is None:
        raise ValueError(f"no route sends {type(msg).__name__}")
    if call.checked is None:
        raise Unauthorized("request is not signed (see docs/API.md, Authentication)")
    backend, admin = spec
    return service.auth.signed_action(call.raw_path, call.checked, lambda ctx: backend(service, ctx, msg), admin)
