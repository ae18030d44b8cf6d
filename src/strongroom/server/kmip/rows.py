"""Every SQL statement on kmip_objects (the repository's rules: one function per statement, the
transaction first, no commit).  An object's material is its deposit's, read and written by the
barrier alone."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from strongroom.server import repository as repo
from strongroom.server.kmip.attrs import Attr
from strongroom.server.repository import DepositRow
from strongroom.server.storage import Tx

STATE_NAMES = {1: "Pre-Active", 2: "Active", 3: "Deactivated", 4: "Compromised", 5: "Destroyed", 6: "Destroyed Compromised"}
# An object's value is its deposit's first version, for good: KMIP never changes a value under
# its identifier, so a later put on the deposit (its owner may) does not reach KMIP's answers.
VALUE_VERSION = 1
TYPE_NAMES = {2: "SymmetricKey", 7: "SecretData", 8: "OpaqueObject"}  # by KMIP object type
PREFIX = "kmip-"  # the deposit name of object UID is PREFIX + UID (a deposit name: policy, get and rm work on it)


@dataclass
class KmipRow:
    deposit: DepositRow
    uid: str
    object_type: int
    state: int
    attrs: list[Attr]
    created: float


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> tuple[Attr, ...]:
    return tuple((str(n), bytes.fromhex(v)) for n, v in json.loads(text))


def _attrs(text: str) -> list[Attr]:
    """An object's attributes from their column, parsed once per distinct text (an object is
    read far more often than it changes)."""
    return list(_parsed(text))


def attrs_text(attrs: list[Attr]) -> str:
    return json.dumps([[n, v.hex()] for n, v in attrs], separators=(",", ":"))


_COLS = "k.uid, k.object_type, k.state, k.attrs, k.created"


def _row(r: tuple[Any, ...]) -> KmipRow:
    return KmipRow(DepositRow(*r[5:]), str(r[0]), int(r[1]), int(r[2]), _attrs(str(r[3])), float(r[4]))


def by_uid(tx: Tx, uid: str) -> KmipRow | None:
    r = tx.one(
        f"SELECT {_COLS}, {repo._DEPOSIT_COLS_D} FROM kmip_objects k JOIN deposits d ON d.id = k.deposit_id WHERE k.uid = ?",
        uid,
    )
    return _row(r) if r is not None else None


def visible(tx: Tx, client_id: str) -> list[KmipRow]:
    """The objects ``client_id`` owns or may read, oldest first."""
    rows = tx.all(
        f"SELECT {_COLS}, {repo._DEPOSIT_COLS_D} FROM kmip_objects k JOIN deposits d ON d.id = k.deposit_id "
        "WHERE d.owner_id = ? OR EXISTS (" + repo._READER.format(dep="d.id") + ") ORDER BY k.created, k.uid",
        client_id,
        client_id,
        client_id,
    )
    return [_row(r) for r in rows]


def insert(tx: Tx, deposit_id: int, uid: str, object_type: int, state: int, attrs: list[Attr], created: float) -> None:
    tx.run(
        "INSERT INTO kmip_objects (deposit_id, uid, object_type, state, attrs, created) VALUES (?, ?, ?, ?, ?, ?)",
        deposit_id,
        uid,
        object_type,
        state,
        attrs_text(attrs),
        created,
    )


def update(tx: Tx, deposit_id: int, state: int, attrs: list[Attr]) -> None:
    tx.run("UPDATE kmip_objects SET state = ?, attrs = ? WHERE deposit_id = ?", state, attrs_text(attrs), deposit_id)


def of_deposits(tx: Tx, deposit_ids: list[int]) -> dict[int, tuple[str, int, int]]:
    """(uid, object type, state) of those deposits that are KMIP objects."""
    if not deposit_ids:
        return {}
    marks = ", ".join("?" for _ in deposit_ids)
    rows = tx.all(f"SELECT deposit_id, uid, object_type, state FROM kmip_objects WHERE deposit_id IN ({marks})", *deposit_ids)
    return {int(r[0]): (str(r[1]), int(r[2]), int(r[3])) for r in rows}
