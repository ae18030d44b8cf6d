"""Objects and their life: how a managed object is found for a caller (owner or reader under
its deposit's policy), made (Create, Register, ReKey), changed (attributes, Activate, Revoke)
and destroyed, with KMIP's state rules.  Every outcome is audited by the operation (ops.py)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable

from strongroom.server import repository as repo
from strongroom.server.ctx import Ctx
from strongroom.server.deposits import Deposits
from strongroom.server.kmip import attrs as a
from strongroom.server.kmip import rows
from strongroom.server.kmip import tags as t
from strongroom.server.kmip.rows import STATE_NAMES, KmipRow
from strongroom.server.kmip.ttlv import dt, e, s, txt

MAX_MATERIAL = 64 * 1024
AES_LENGTHS = (128, 192, 256)
PRIVATE = "_"  # attributes the server keeps for itself (the registered key format): never shown


class Fail(Exception):
    """One batch item's failure: a KMIP result reason and a message for the client."""

    def __init__(self, reason: int, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def target(row: KmipRow) -> str:
    return f"{row.deposit.owner_id}/{row.deposit.name}"


def shown(attrs: list[a.Attr]) -> list[a.Attr]:
    return [x for x in attrs if not x[0].startswith(PRIVATE)]


class Lifecycle:
    def __init__(self, deposits: Deposits, clock: Callable[[], float] = time.time) -> None:
        self.deposits = deposits
        self.clock = clock

    def now(self) -> int:
        return int(self.clock())

    # -- finding ---------------------------------------------------------------------------
    def find(self, ctx: Ctx, uid: str, op: str, owner_only: bool) -> KmipRow:
        """The object ``uid`` if the caller may see it (owner, or reader when not ``owner_only``);
        an object another client owns and does not share is not found, as one that is not there."""
        row = rows.by_uid(ctx.tx, uid) if 0 < len(uid) <= 64 else None
        me = ctx.client.id
        if row is None or not (row.deposit.owner_id == me or repo.may_read(ctx.tx, row.deposit.id, me)):
            ctx.audit.append(me, f"kmip.{op}", f"kmip:{uid[:64]}", "denied", reason="not found or not visible")
            raise Fail(t.ITEM_NOT_FOUND, "no object with this identifier")
        if owner_only and row.deposit.owner_id != me:
            ctx.audit.append(me, f"kmip.{op}", target(row), "denied", reason="not the owner")
            raise Fail(t.PERMISSION_DENIED, f"only the object's owner may {op} it")
        return row

    # -- making ----------------------------------------------------------------------------
    def check_client_attrs(self, given: list[a.Attr]) -> None:
        seen: set[str] = set()
        for name, _ in given:
            spec = a.spec_of(name)
            if spec is not None and not spec.client_sets:
                raise Fail(t.INVALID_FIELD, f"{name} is set by the server")
            if spec is not None and not spec.multi and name in seen:
                raise Fail(t.INVALID_FIELD, f"{name} is given twice")
            seen.add(name)

    def make(self, ctx: Ctx, op: str, object_type: int, material: bytes, given: list[a.Attr], private: list[a.Attr]) -> KmipRow:
        """A new object of the caller's: its material sealed as deposit kmip/UID, its attributes
        the given ones and the server's (identifier, type, state, dates)."""
        if len(given) > a.MAX_ATTRIBUTES:
            raise Fail(t.INVALID_FIELD, "too many attributes")
        uid = str(uuid.UUID(bytes=os.urandom(16), version=4))
        now = self.now()
        activation = a.first(given, "Activation Date")
        state = t.ACTIVE if activation is not None and activation.value <= now else t.PRE_ACTIVE
        server = [
            a.value_of("Unique Identifier", txt(t.UNIQUE_IDENTIFIER, uid)),
            a.value_of("Object Type", e(t.OBJECT_TYPE, object_type)),
            a.value_of("State", e(t.STATE, state)),
            a.value_of("Initial Date", dt(t.INITIAL_DATE, now)),
            a.value_of("Last Change Date", dt(t.LAST_CHANGE_DATE, now)),
        ]
        attrs = server + given + private
        made = self.deposits.put_named(ctx, rows.PREFIX + uid, material, None, f"kmip.{op}")
        dep = repo.deposit(ctx.tx, ctx.client.id, rows.PREFIX + uid)
        assert dep is not None and made["version"] == 1
        rows.insert(ctx.tx, dep.id, uid, object_type, state, attrs, float(now))
        return KmipRow(dep, uid, object_type, state, attrs, float(now))

    def new_key(self, length: int) -> bytes:
        if length not in AES_LENGTHS:
            raise Fail(t.INVALID_FIELD, f"AES keys are 128, 192 or 256 bits, not {length}")
        return os.urandom(length // 8)  # the OS CSPRNG

    # -- changing --------------------------------------------------------------------------
    def save(self, ctx: Ctx, row: KmipRow, state: int, attrs: list[a.Attr]) -> None:
        attrs = a.replace(attrs, "State", e(t.STATE, state))
        attrs = a.replace(attrs, "Last Change Date", dt(t.LAST_CHANGE_DATE, self.now()))
        rows.update(ctx.tx, row.deposit.id, state, attrs)
        row.state, row.attrs = state, attrs

    def activate(self, ctx: Ctx, row: KmipRow) -> None:
        if row.state != t.PRE_ACTIVE:
            raise Fail(t.PERMISSION_DENIED, f"the object is {STATE_NAMES[row.state]}, not Pre-Active: it cannot be activated")
        self.save(ctx, row, t.ACTIVE, a.replace(row.attrs, "Activation Date", dt(t.ACTIVATION_DATE, self.now())))

    def revoke(self, ctx: Ctx, row: KmipRow, code: int, message: str | None, occurred: int | None) -> None:
        now = self.now()
        reason = s(
            t.REVOCATION_REASON, e(t.REVOCATION_REASON_CODE, code), txt(t.REVOCATION_MESSAGE, message) if message else None
        )
        attrs = a.replace(row.attrs, "Revocation Reason", reason)
        if code == t.KEY_COMPROMISE:
            if row.state not in (t.PRE_ACTIVE, t.ACTIVE, t.DEACTIVATED):
                raise Fail(t.PERMISSION_DENIED, f"a {STATE_NAMES[row.state]} object cannot be marked compromised")
            attrs = a.replace(attrs, "Compromise Date", dt(t.COMPROMISE_DATE, now))
            attrs = a.replace(attrs, "Compromise Occurrence Date", dt(t.COMPROMISE_OCCURRENCE_DATE, occurred or now))
            self.save(ctx, row, t.COMPROMISED, attrs)
            return
        if row.state != t.ACTIVE:
            raise Fail(t.ILLEGAL_OPERATION, "only an Active object can be revoked for a reason other than key compromise")
        self.save(ctx, row, t.DEACTIVATED, a.replace(attrs, "Deactivation Date", dt(t.DEACTIVATION_DATE, now)))

    def destroy(self, ctx: Ctx, row: KmipRow) -> None:
        if row.state == t.ACTIVE:
            raise Fail(t.PERMISSION_DENIED, "an Active object cannot be destroyed: revoke it first")
        self.deposits.barrier.destroy_deposit(ctx.tx, row.deposit.id)

    def rekey(self, ctx: Ctx, row: KmipRow, offset: int | None, given: list[a.Attr]) -> KmipRow:
        """A new key replacing ``row``'s: its attributes carried over (the names move to it),
        linked both ways; active now (or after ``offset`` seconds) if the old one was activated."""
        if row.object_type != t.SYMMETRIC_KEY_TYPE:
            raise Fail(t.INVALID_FIELD, "only symmetric keys can be re-keyed")
        if row.state not in (t.PRE_ACTIVE, t.ACTIVE, t.DEACTIVATED):
            raise Fail(t.PERMISSION_DENIED, f"a {STATE_NAMES[row.state]} object cannot be re-keyed")
        length = a.first(row.attrs, "Cryptographic Length")
        key = self.new_key(int(length.value) if length is not None else 256)
        keep = {"Unique Identifier", "Object Type", "State", "Initial Date", "Last Change Date", "Activation Date", "Link"}
        keep |= {"Deactivation Date", "Revocation Reason", "Compromise Date", "Compromise Occurrence Date", "Destroy Date"}
        carried = [x for x in row.attrs if x[0] not in keep and not x[0].startswith(PRIVATE)]
        overridden = {n for n, _ in given}
        carried = [x for x in carried if x[0] not in overridden] + given
        if offset is not None or a.first(row.attrs, "Activation Date") is not None:
            carried.append(a.value_of("Activation Date", dt(t.ACTIVATION_DATE, self.now() + (offset or 0))))
        carried.append(
            a.value_of("Link", s(t.LINK, e(t.LINK_TYPE, t.REPLACED_OBJECT_LINK), txt(t.LINKED_OBJECT_IDENTIFIER, row.uid)))
        )
        new = self.make(ctx, "rekey", t.SYMMETRIC_KEY_TYPE, key, carried, [x for x in row.attrs if x[0].startswith(PRIVATE)])
        old = [x for x in row.attrs if x[0] != "Name"]
        old.append(
            a.value_of("Link", s(t.LINK, e(t.LINK_TYPE, t.REPLACEMENT_OBJECT_LINK), txt(t.LINKED_OBJECT_IDENTIFIER, new.uid)))
        )
        self.save(ctx, row, row.state, old)
        return new

    # -- attributes ------------------------------------------------------------------------
    def add(self, ctx: Ctx, row: KmipRow, attr: a.Attr) -> int:
        """Attribute ``attr`` added; its index among its name's values."""
        name = attr[0]
        spec = a.spec_of(name)
        have = [x for x in row.attrs if x[0] == name]
        if spec is not None and not spec.client_sets:
            raise Fail(t.PERMISSION_DENIED, f"{name} is set by the server")
        if have and (spec is None or not spec.multi) and not name.lower().startswith(("x-", "y-")):
            raise Fail(t.ILLEGAL_OPERATION, f"{name} already has a value (modify it instead)")
        if spec is not None and not spec.modifiable:
            raise Fail(t.PERMISSION_DENIED, f"{name} cannot be added after the object was made")
        if len(row.attrs) >= a.MAX_ATTRIBUTES:
            raise Fail(t.INVALID_FIELD, "too many attributes")
        self.save(ctx, row, row.state, [*row.attrs, attr])
        return len(have)

    def _changeable(self, name: str) -> None:
        spec = a.spec_of(name)
        if spec is not None and (not spec.client_sets or not spec.modifiable):
            raise Fail(t.PERMISSION_DENIED, f"{name} cannot be changed by a client")

    def modify(self, ctx: Ctx, row: KmipRow, attr: a.Attr, index: int, current: bytes | None = None) -> None:
        """Value ``index`` of the attribute (or the value equal to ``current``) replaced."""
        self._changeable(attr[0])
        at = self._position(row, attr[0], index, current)
        self.save(ctx, row, row.state, [attr if n == at else x for n, x in enumerate(row.attrs)])

    def delete(self, ctx: Ctx, row: KmipRow, name: str, index: int, current: bytes | None = None) -> a.Attr:
        spec = a.spec_of(name)
        if spec is not None and (not spec.client_sets or not spec.deletable):
            raise Fail(t.PERMISSION_DENIED, f"{name} cannot be deleted")
        at = self._position(row, name, index, current)
        gone = row.attrs[at]
        self.save(ctx, row, row.state, [x for n, x in enumerate(row.attrs) if n != at])
        return gone

    def _position(self, row: KmipRow, name: str, index: int, current: bytes | None) -> int:
        seen = 0
        for n, (have, value) in enumerate(row.attrs):
            if have != name:
                continue
            if (current is None and seen == index) or (current is not None and value == current):
                return n
            seen += 1
        raise Fail(t.ITEM_NOT_FOUND, f"the object has no such value of {name}")

    def set_value(self, ctx: Ctx, row: KmipRow, attr: a.Attr) -> None:
        """2.0 Set Attribute: a single-valued attribute given or replaced."""
        spec = a.spec_of(attr[0])
        self._changeable(attr[0])
        if spec is not None and spec.multi:
            raise Fail(t.INVALID_FIELD, f"{attr[0]} has several values: add or modify one")
        self.save(ctx, row, row.state, [*(x for x in row.attrs if x[0] != attr[0]), attr])
