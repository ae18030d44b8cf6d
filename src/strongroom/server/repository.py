"""Every SQL statement the server runs on its tables, by table (those of the Vault surface are in
vault_rows.py): the service (service.py), the barrier, the audit chain, node coordination, setup
and backup ask for rows and changes here and write no SQL themselves.  Row types are dataclasses
whose SELECT lists are derived from, and checked against, the table definitions
(storage.columns_of), so a row type and its table cannot drift apart.  Each function takes the
open transaction first; none commits.

The key and version rows (master_keys, system_keys, deposit_versions) hold only wrapped keys and
ciphertext, and only the barrier (barrier.py) calls their functions: the service gets plaintext
from the barrier, never a row.  Left in storage.py, which owns connections and the migrations: the
transaction helpers' lock on the audit head and the schema migrations; left in backup.py: its
schema-wide copy of every table (SELECT * / INSERT by the schema's own table and column names).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from strongroom.server import schema
from strongroom.server import storage as st
from strongroom.server.storage import Tx


# -- clients -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClientRow:
    id: str
    org_id: int | None
    name: str
    role: str
    status: str
    public_key: bytes


_CLIENT_COLS = st.columns_of(ClientRow, schema.clients)


def client(tx: Tx, client_id: str) -> ClientRow | None:
    row = tx.one(f"SELECT {_CLIENT_COLS} FROM clients WHERE id = ?", client_id)
    return ClientRow(row[0], row[1], row[2], row[3], row[4], bytes(row[5])) if row is not None else None


def client_public_key(tx: Tx, client_id: str) -> bytes | None:
    raw = tx.value("SELECT public_key FROM clients WHERE id = ?", client_id)
    return None if raw is None else bytes(raw)


def insert_client(tx: Tx, client_id: str, org_id: int | None, name: str, public_key: bytes, role: str, created: float) -> None:
    """A new active client (an integrity error if its id or public key is taken)."""
    tx.run(
        "INSERT INTO clients (id, org_id, name, public_key, role, status, created) VALUES (?, ?, ?, ?, ?, ?, ?)",
        client_id,
        org_id,
        name,
        public_key,
        role,
        "active",
        created,
    )


def client_in_org(tx: Tx, client_id: str, org_id: int | None) -> bool:
    return tx.one("SELECT 1 FROM clients WHERE id = ? AND org_id = ?", client_id, org_id) is not None


def set_client_status(tx: Tx, client_id: str, status: str) -> None:
    tx.run("UPDATE clients SET status = ? WHERE id = ?", status, client_id)


def list_clients(tx: Tx) -> list[tuple[Any, ...]]:
    """(id, name, organization name, role, status, created) of every client, oldest first."""
    return tx.all(
        "SELECT c.id, c.name, o.name, c.role, c.status, c.created "
        "FROM clients c LEFT JOIN orgs o ON o.id = c.org_id ORDER BY c.created"
    )


def client_counts(tx: Tx) -> dict[int, int]:
    """Organization id -> how many clients it has."""
    return {
        int(org_id): int(n) for org_id, n in tx.all("SELECT org_id, COUNT(*) FROM clients GROUP BY org_id") if org_id is not None
    }


# -- request nonces and registration failures --------------------------------------------------
def record_nonce(tx: Tx, ts: int, nonce: str, client_id: str) -> bool:
    """Whether the nonce was fresh (a nonce seen before inserts nothing: no savepoint and no
    error to unwind per request)."""
    return (
        tx.run("INSERT INTO seen_nonces (ts, nonce, client_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING", ts, nonce, client_id)
        == 1
    )


def registration_failures(tx: Tx, source: str, since: float) -> int:
    return int(tx.value("SELECT COUNT(*) FROM registration_failures WHERE source = ? AND at > ?", source, since) or 0)


def record_registration_failure(tx: Tx, source: str, at: float, forget_before: float) -> None:
    tx.run("DELETE FROM registration_failures WHERE source = ? AND at <= ?", source, forget_before)
    tx.run("INSERT INTO registration_failures (source, at) VALUES (?, ?)", source, at)


# -- organizations -----------------------------------------------------------------------------
def org_secret(tx: Tx, name: str) -> tuple[int, bytes] | None:
    """(id, secret hash) of the organization ``name``."""
    row = tx.one("SELECT id, secret_hash FROM orgs WHERE name = ?", name)
    return None if row is None else (int(row[0]), bytes(row[1]))


def org_id(tx: Tx, name: str) -> int | None:
    value = tx.value("SELECT id FROM orgs WHERE name = ?", name)
    return None if value is None else int(value)


def org_name(tx: Tx, org: int) -> str | None:
    value = tx.value("SELECT name FROM orgs WHERE id = ?", org)
    return None if value is None else str(value)


def insert_org(tx: Tx, name: str, secret_hash: bytes, created: float) -> None:
    """A new organization (an integrity error if the name is taken)."""
    tx.run("INSERT INTO orgs (name, secret_hash, created) VALUES (?, ?, ?)", name, secret_hash, created)


def list_orgs(tx: Tx) -> list[tuple[int, str, float]]:
    """(id, name, created) of every organization, by name."""
    return [(int(i), str(n), float(c)) for i, n, c in tx.all("SELECT id, name, created FROM orgs ORDER BY name")]


def set_org_secret(tx: Tx, org: int, secret_hash: bytes) -> None:
    tx.run("UPDATE orgs SET secret_hash = ? WHERE id = ?", secret_hash, org)


# -- groups ------------------------------------------------------------------------------------
def group_id(tx: Tx, org: int | None, name: str) -> int | None:
    value = tx.value("SELECT id FROM groups WHERE org_id = ? AND name = ?", org, name)
    return None if value is None else int(value)


def insert_group(tx: Tx, org: int, name: str) -> None:
    tx.run("INSERT INTO groups (org_id, name) VALUES (?, ?)", org, name)


def groups_of(tx: Tx, org: int) -> list[tuple[int, str]]:
    """(id, name) of an organization's groups, by name."""
    return [(int(g), str(n)) for g, n in tx.all("SELECT id, name FROM groups WHERE org_id = ? ORDER BY name", org)]


def members(tx: Tx, group: int) -> list[str]:
    return sorted(str(r[0]) for r in tx.all("SELECT client_id FROM group_members WHERE group_id = ?", group))


def add_member(tx: Tx, group: int, client_id: str) -> None:
    """Adds the client (nothing if it is a member already)."""
    if tx.one("SELECT 1 FROM group_members WHERE group_id = ? AND client_id = ?", group, client_id) is None:
        tx.run("INSERT INTO group_members (group_id, client_id) VALUES (?, ?)", group, client_id)


def remove_member(tx: Tx, group: int, client_id: str) -> None:
    tx.run("DELETE FROM group_members WHERE group_id = ? AND client_id = ?", group, client_id)


def delete_group(tx: Tx, group: int, org: int, name: str) -> None:
    """The group, its memberships, and the reader grants naming it on the organization's deposits."""
    tx.run("DELETE FROM group_members WHERE group_id = ?", group)
    tx.run(
        "DELETE FROM deposit_readers WHERE kind = 'group' AND principal = ? AND deposit_id IN "
        "(SELECT d.id FROM deposits d JOIN clients c ON c.id = d.owner_id WHERE c.org_id = ?)",
        name,
        org,
    )
    tx.run("DELETE FROM groups WHERE id = ?", group)


# -- deposits and their policy -----------------------------------------------------------------
@dataclass(frozen=True)
class DepositRow:
    id: int
    owner_id: str
    name: str
    latest_version: int
    expires_at: float | None
    not_before: float | None
    max_retrievals: int | None
    retrievals: int
    created: float
    updated: float
    approvals_required: int
    approval_window: int


_DEPOSIT_COLS = st.columns_of(DepositRow, schema.deposits)
_DEPOSIT_COLS_D = ", ".join("d." + c for c in _DEPOSIT_COLS.split(", "))


def deposit(tx: Tx, owner_id: str, name: str) -> DepositRow | None:
    row = tx.one(f"SELECT {_DEPOSIT_COLS} FROM deposits WHERE owner_id = ? AND name = ?", owner_id, name)
    return DepositRow(*row) if row is not None else None


def deposit_by_id(tx: Tx, deposit_id: int) -> DepositRow | None:
    row = tx.one(f"SELECT {_DEPOSIT_COLS} FROM deposits WHERE id = ?", deposit_id)
    return DepositRow(*row) if row is not None else None


def deposits_of(tx: Tx, owner_id: str) -> list[DepositRow]:
    return [DepositRow(*r) for r in tx.all(f"SELECT {_DEPOSIT_COLS} FROM deposits WHERE owner_id = ? ORDER BY name", owner_id)]


def deposits_with_readers(tx: Tx, not_owner: str) -> list[DepositRow]:
    """Deposits of other owners that name any reader (who may read each is ``may_read``'s)."""
    rows = tx.all(
        f"SELECT DISTINCT {_DEPOSIT_COLS_D} FROM deposits d "
        "JOIN deposit_readers r ON r.deposit_id = d.id WHERE d.owner_id <> ? ORDER BY d.owner_id, d.name",
        not_owner,
    )
    return [DepositRow(*r) for r in rows]


def insert_deposit(tx: Tx, owner_id: str, name: str, now: float, latest_version: int = 1) -> int:
    """A new deposit at ``latest_version`` (1, or 0 for one with no version yet); returns its id."""
    return int(
        tx.value(
            "INSERT INTO deposits (owner_id, name, latest_version, retrievals, created, updated) "
            "VALUES (?, ?, ?, 0, ?, ?) RETURNING id",
            owner_id,
            name,
            latest_version,
            now,
            now,
        )
    )


def set_latest_version(tx: Tx, deposit_id: int, version: int, now: float) -> None:
    tx.run("UPDATE deposits SET latest_version = ?, updated = ? WHERE id = ?", version, now, deposit_id)


def set_policy(
    tx: Tx,
    deposit_id: int,
    readers: list[tuple[str, str]],
    expires_at: float | None,
    not_before: float | None,
    max_retrievals: int | None,
) -> None:
    """Replace a deposit's readers ((kind, principal) pairs) and its time and count limits."""
    tx.run("DELETE FROM deposit_readers WHERE deposit_id = ?", deposit_id)
    if readers:
        tx.many(
            "INSERT INTO deposit_readers (deposit_id, kind, principal) VALUES (?, ?, ?)", [(deposit_id, k, p) for k, p in readers]
        )
    tx.run(
        "UPDATE deposits SET expires_at = ?, not_before = ?, max_retrievals = ? WHERE id = ?",
        expires_at,
        not_before,
        max_retrievals,
        deposit_id,
    )


def readers(tx: Tx, deposit_id: int) -> list[tuple[str, str]]:
    return [(str(k), str(p)) for k, p in tx.all("SELECT kind, principal FROM deposit_readers WHERE deposit_id = ?", deposit_id)]


_READER = (
    "SELECT 1 FROM deposit_readers r WHERE r.deposit_id = {dep} AND ("
    "(r.kind = 'client' AND r.principal = ?) OR "
    "(r.kind = 'group' AND r.principal IN ("
    "SELECT g.name FROM groups g JOIN group_members m ON m.group_id = g.id WHERE m.client_id = ?)))"
)


def visible_deposit(tx: Tx, owner_id: str, name: str, client_id: str) -> DepositRow | None:
    """The deposit if ``client_id`` may see it (its owner or a reader), else None -- in one
    statement, so that a deposit that exists but is not visible costs the same round trips as
    one that does not exist (the answer's timing does not tell them apart)."""
    row = tx.one(
        f"SELECT {_DEPOSIT_COLS}, CASE WHEN owner_id = ? THEN TRUE ELSE EXISTS ({_READER.format(dep='deposits.id')}) END "
        "FROM deposits WHERE owner_id = ? AND name = ?",
        client_id,
        client_id,
        client_id,
        owner_id,
        name,
    )
    if row is None or not row[-1]:
        return None
    return DepositRow(*row[:-1])


def may_read(tx: Tx, deposit_id: int, client_id: str) -> bool:
    """Whether the deposit names the client as a reader, itself or through one of its groups."""
    hit = tx.one(
        _READER.format(dep="?") + " LIMIT 1",
        deposit_id,
        client_id,
        client_id,
    )
    return hit is not None


def count_retrieval(tx: Tx, deposit_id: int) -> bool:
    """Count one retrieval unless the limit is reached (one conditional update: exact under
    concurrency); whether it was counted."""
    counted = tx.run(
        "UPDATE deposits SET retrievals = retrievals + 1 "
        "WHERE id = ? AND (max_retrievals IS NULL OR retrievals < max_retrievals)",
        deposit_id,
    )
    return counted == 1


def delete_deposit(tx: Tx, deposit_id: int) -> None:
    """The deposit, its readers, every version, its KV v2 state and KMIP identity."""
    tx.run("DELETE FROM deposit_versions WHERE deposit_id = ?", deposit_id)
    tx.run("DELETE FROM deposit_readers WHERE deposit_id = ?", deposit_id)
    tx.run("DELETE FROM kv_versions WHERE deposit_id = ?", deposit_id)
    tx.run("DELETE FROM kv_settings WHERE deposit_id = ?", deposit_id)
    tx.run("DELETE FROM kmip_objects WHERE deposit_id = ?", deposit_id)
    tx.run("DELETE FROM deposits WHERE id = ?", deposit_id)


# -- seal state and refusals held while sealed -------------------------------------------------
def delete_grants(tx: Tx) -> None:
    tx.run("DELETE FROM grants")


def held_events(tx: Tx) -> list[tuple[float, str, str, str, str]]:
    """(ts, actor, action, outcome, JSON detail) of the refusals made while sealed, oldest first."""
    return [tuple(r) for r in tx.all("SELECT ts, actor, action, outcome, detail FROM sealed_events ORDER BY ts")]  # type: ignore[misc]


def clear_held_events(tx: Tx) -> None:
    tx.run("DELETE FROM sealed_events")


def count_held_events(tx: Tx) -> int:
    return int(tx.value("SELECT COUNT(*) FROM sealed_events") or 0)


def hold_event(tx: Tx, ts: float, actor: str, action: str, outcome: str, detail_json: str) -> None:
    tx.run(
        "INSERT INTO sealed_events (ts, actor, action, outcome, detail) VALUES (?, ?, ?, ?, ?)",
        ts,
        actor,
        action,
        outcome,
        detail_json,
    )


# -- the audit log, read -----------------------------------------------------------------------
AUDIT_COLS = "seq, ts, actor, action, target, outcome, detail"


def audit_entries(tx: Tx, after: int, limit: int) -> list[tuple[Any, ...]]:
    """Entries after ``seq`` ``after`` (the last ``limit`` if ``after`` < 0), oldest first."""
    if after < 0:
        return list(reversed(tx.all(f"SELECT {AUDIT_COLS} FROM audit ORDER BY seq DESC LIMIT ?", limit)))
    return tx.all(f"SELECT {AUDIT_COLS} FROM audit WHERE seq > ? ORDER BY seq LIMIT ?", after, limit)


def append_audit_rows(tx: Tx, rows: Sequence[tuple[int, float, str, str, str, str, str, bytes]]) -> None:
    """Entries (seq, ts, actor, action, target, outcome, detail, mac), in one statement."""
    tx.many("INSERT INTO audit (seq, ts, actor, action, target, outcome, detail, mac) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)


def all_audit(tx: Tx) -> list[tuple[Any, ...]]:
    """(seq, ts, actor, action, target, outcome, detail, mac) of every entry, in order."""
    return tx.all("SELECT seq, ts, actor, action, target, outcome, detail, mac FROM audit ORDER BY seq")


def last_audit_seq(tx: Tx) -> int:
    return int(tx.value("SELECT MAX(seq) FROM audit") or 0)


def audit_head(tx: Tx) -> tuple[int, bytes] | None:
    """The chain head row: (seq, mac) of the last entry."""
    row = tx.one("SELECT seq, mac FROM audit_head WHERE id = 1")
    return None if row is None else (int(row[0]), bytes(row[1]))


def set_audit_head(tx: Tx, seq: int, mac: bytes) -> None:
    tx.run("UPDATE audit_head SET seq = ?, mac = ? WHERE id = 1", seq, mac)


def insert_audit_head(tx: Tx) -> None:
    """The head of an empty chain (a fresh database)."""
    tx.run("INSERT INTO audit_head (id, seq, mac) VALUES (1, 0, ?)", bytes(32))


# -- settings ----------------------------------------------------------------------------------
def get_meta(tx: Tx, key: str) -> str | None:
    v = tx.value("SELECT value FROM meta WHERE key = ?", key)
    return str(v) if v is not None else None


def set_meta(tx: Tx, key: str, value: str) -> None:
    if tx.run("UPDATE meta SET value = ? WHERE key = ?", value, key) == 0:
        tx.run("INSERT INTO meta (key, value) VALUES (?, ?)", key, value)


# -- server processes sharing one database (nodes.py) ------------------------------------------
def insert_node(tx: Tx, node_id: str, public_key: bytes, tag: bytes, heartbeat: float) -> None:
    tx.run("INSERT INTO nodes (id, public_key, tag, heartbeat) VALUES (?, ?, ?, ?)", node_id, public_key, tag, heartbeat)


def delete_node(tx: Tx, node_id: str) -> None:
    """A node and the grants made to it."""
    tx.run("DELETE FROM grants WHERE node_id = ?", node_id)
    tx.run("DELETE FROM nodes WHERE id = ?", node_id)


def heartbeat(tx: Tx, node_id: str, now: float) -> None:
    tx.run("UPDATE nodes SET heartbeat = ? WHERE id = ?", now, node_id)


def grant_for(tx: Tx, node_id: str, epoch: int) -> bytes | None:
    box = tx.value("SELECT box FROM grants WHERE node_id = ? AND epoch = ?", node_id, epoch)
    return None if box is None else bytes(box)


def delete_grant(tx: Tx, node_id: str, epoch: int) -> None:
    tx.run("DELETE FROM grants WHERE node_id = ? AND epoch = ?", node_id, epoch)


def granted_nodes(tx: Tx, epoch: int) -> set[str]:
    return {str(r[0]) for r in tx.all("SELECT node_id FROM grants WHERE epoch = ?", epoch)}


def live_nodes(tx: Tx, since: float) -> list[tuple[str, bytes, bytes]]:
    """(id, public key, tag) of the nodes heard from since ``since``."""
    return [
        (str(i), bytes(p), bytes(t)) for i, p, t in tx.all("SELECT id, public_key, tag FROM nodes WHERE heartbeat > ?", since)
    ]


def insert_grant(tx: Tx, node_id: str, epoch: int, box: bytes) -> None:
    tx.run("INSERT INTO grants (node_id, epoch, box) VALUES (?, ?, ?)", node_id, epoch, box)


def forget_stale(tx: Tx, epoch: int, stale: float, nonces_before: int) -> None:
    """Grants of other epochs or of silent nodes, those nodes, and nonces too old to replay."""
    tx.run("DELETE FROM grants WHERE epoch <> ? OR node_id IN (SELECT id FROM nodes WHERE heartbeat < ?)", epoch, stale)
    tx.run("DELETE FROM nodes WHERE heartbeat < ?", stale)
    tx.run("DELETE FROM seen_nonces WHERE ts < ?", nonces_before)


# -- keys (for the barrier only: every value here is wrapped or sealed) ------------------------
def insert_master_key(tx: Tx, generation: int, wrapped: bytes, created: float) -> None:
    tx.run("INSERT INTO master_keys (generation, wrapped, created) VALUES (?, ?, ?)", generation, wrapped, created)


def master_key(tx: Tx, generation: int) -> bytes | None:
    wrapped = tx.value("SELECT wrapped FROM master_keys WHERE generation = ?", generation)
    return None if wrapped is None else bytes(wrapped)


def set_master_key(tx: Tx, generation: int, wrapped: bytes) -> None:
    tx.run("UPDATE master_keys SET wrapped = ? WHERE generation = ?", wrapped, generation)


def keep_only_master_key(tx: Tx, generation: int) -> None:
    tx.run("DELETE FROM master_keys WHERE generation <> ?", generation)


def insert_system_key(tx: Tx, name: str, master_gen: int, wrapped: bytes) -> None:
    tx.run("INSERT INTO system_keys (name, master_gen, wrapped) VALUES (?, ?, ?)", name, master_gen, wrapped)


def system_keys(tx: Tx) -> list[tuple[str, bytes]]:
    return [(str(n), bytes(w)) for n, w in tx.all("SELECT name, wrapped FROM system_keys")]


def system_key(tx: Tx, name: str) -> bytes | None:
    wrapped = tx.value("SELECT wrapped FROM system_keys WHERE name = ?", name)
    return None if wrapped is None else bytes(wrapped)


def set_system_key(tx: Tx, name: str, master_gen: int, wrapped: bytes) -> None:
    tx.run("UPDATE system_keys SET master_gen = ?, wrapped = ? WHERE name = ?", master_gen, wrapped, name)


def insert_version(
    tx: Tx, deposit_id: int, version: int, master_gen: int, wrapped_key: bytes, ciphertext: bytes, created: float
) -> None:
    tx.run(
        "INSERT INTO deposit_versions (deposit_id, version, master_gen, wrapped_key, ciphertext, created) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        deposit_id,
        version,
        master_gen,
        wrapped_key,
        ciphertext,
        created,
    )


def version(tx: Tx, deposit_id: int, version: int) -> tuple[int, bytes, bytes] | None:
    """(master generation, wrapped data key, ciphertext) of one deposit version."""
    row = tx.one(
        "SELECT master_gen, wrapped_key, ciphertext FROM deposit_versions WHERE deposit_id = ? AND version = ?",
        deposit_id,
        version,
    )
    return None if row is None else (int(row[0]), bytes(row[1]), bytes(row[2]))


def version_keys(tx: Tx) -> list[tuple[int, int, bytes, str]]:
    """(deposit id, version, wrapped data key, owner) of every version, for a master key rotation."""
    rows = tx.all(
        "SELECT v.deposit_id, v.version, v.wrapped_key, d.owner_id FROM deposit_versions v JOIN deposits d ON d.id = v.deposit_id"
    )
    return [(int(d), int(v), bytes(w), str(o)) for d, v, w, o in rows]


def set_version_key(tx: Tx, deposit_id: int, version: int, master_gen: int, wrapped_key: bytes) -> None:
    tx.run(
        "UPDATE deposit_versions SET master_gen = ?, wrapped_key = ? WHERE deposit_id = ? AND version = ?",
        master_gen,
        wrapped_key,
        deposit_id,
        version,
    )


def delete_version(tx: Tx, deposit_id: int, version: int) -> None:
    """One version's row (its wrapped key and ciphertext) gone for good."""
    tx.run("DELETE FROM deposit_versions WHERE deposit_id = ? AND version = ?", deposit_id, version)


def delete_versions_below(tx: Tx, deposit_id: int, version: int) -> None:
    tx.run("DELETE FROM deposit_versions WHERE deposit_id = ? AND version < ?", deposit_id, version)
    tx.run("DELETE FROM kv_versions WHERE deposit_id = ? AND version < ?", deposit_id, version)


def version_times(tx: Tx, deposit_id: int) -> dict[int, float]:
    """Version -> creation time of the versions a deposit still holds."""
    return {int(v): float(t) for v, t in tx.all("SELECT version, created FROM deposit_versions WHERE deposit_id = ?", deposit_id)}
