"""A request's context inside its transaction: the transaction, the authenticated client, and
the audit writer its entries go to."""

from __future__ import annotations

from dataclasses import dataclass

from strongroom.server import audit as audit_mod
from strongroom.server.repository import ClientRow
from strongroom.server.storage import Tx


@dataclass
class Ctx:
    tx: Tx
    client: ClientRow
    audit: audit_mod.AuditWriter
