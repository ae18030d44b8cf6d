"""Every SQL statement the server runs on its tables, by table: the service (service.py), the
barrier, the audit chain, node coordination, setup and backup ask for rows and changes here and
write no SQL themselves.  Row types are dataclasses whose SELECT lists are derived from, and
checked against, the table definitions (storage.columns_of), so a row type and its table cannot
drift apart.  Each function takes the open transaction first; none commits.

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


def insert_deposit(tx: Tx, owner_id: str, name: str, now: float) -> int:
    """A new deposit at version 1; returns its id."""
    return int(
        tx.value(
            "INSERT INTO deposits (owner_id, name, latest_version, retrievals, created, updated) "
            "VALUES (?, ?, 1, 0, ?, ?) RETURNING id",
            owner_id,
            name,
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


def may_read(tx: Tx, deposit_id: int, client_id: str) -> bool:
    """Whether the deposit names the client as a reader, itself or through one of its groups."""
    hit = tx.one(
        "SELECT 1 FROM deposit_readers r WHERE r.deposit_id = ? AND ("
        "(r.kind = 'client' AND r.principal = ?) OR "
        "(r.kind = 'group' AND r.principal IN ("
        "SELECT g.name FROM groups g JOIN group_members m ON m.group_id = g.id WHERE m.client_id = ?)))"
        " LIMIT 1",
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
    """The deposit, its readers, every version and its KV v2 state."""
    tx.run("DELETE FROM deposit_versions WHERE deposit_id = ?", deposit_id)
    tx.run("DELETE FROM deposit_readers WHERE deposit_id = ?", deposit_id)
    tx.run("DELETE FROM kv_versions WHERE deposit_id = ?", deposit_id)
    tx.run("DELETE FROM kv_settings WHERE deposit_id = ?", deposit_id)
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


# -- Vault-compatible surface: tokens, policies, KV v2 state ------------------------------------
@dataclass(frozen=True)
class TokenRow:
    accessor: str
    client_id: str
    parent: str | None
    policies: str
    display_name: str
    meta: str
    created: float
    expires: float | None
    period: int
    max_expires: float | None
    uses_left: int
    renewable: int


_TOKEN_COLS = st.columns_of(TokenRow, schema.vault_tokens)


def token_by_accessor(tx: Tx, accessor: str) -> TokenRow | None:
    row = tx.one(f"SELECT {_TOKEN_COLS} FROM vault_tokens WHERE accessor = ?", accessor)
    return TokenRow(*row) if row is not None else None


def insert_token(tx: Tx, t: TokenRow, token_hash: bytes) -> None:
    tx.run(
        f"INSERT INTO vault_tokens ({_TOKEN_COLS}, token_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        t.accessor,
        t.client_id,
        t.parent,
        t.policies,
        t.display_name,
        t.meta,
        t.created,
        t.expires,
        t.period,
        t.max_expires,
        t.uses_left,
        t.renewable,
        token_hash,
    )


def use_token(tx: Tx, accessor: str) -> None:
    """One use of a token with a limited number of uses."""
    tx.run("UPDATE vault_tokens SET uses_left = uses_left - 1 WHERE accessor = ? AND uses_left > 0", accessor)


def set_token_expiry(tx: Tx, accessor: str, expires: float) -> None:
    tx.run("UPDATE vault_tokens SET expires = ? WHERE accessor = ?", expires, accessor)


def revoke_token_tree(tx: Tx, accessor: str) -> int:
    """The token and every token made from it, at any depth; how many were revoked."""
    gone, todo = 0, [accessor]
    while todo:
        a = todo.pop()
        todo.extend(str(c) for (c,) in tx.all("SELECT accessor FROM vault_tokens WHERE parent = ?", a))
        gone += tx.run("DELETE FROM vault_tokens WHERE accessor = ?", a)
    return gone


def revoke_client_tokens(tx: Tx, client_id: str) -> int:
    return tx.run("DELETE FROM vault_tokens WHERE client_id = ?", client_id)


def forget_expired_tokens(tx: Tx, now: float) -> None:
    tx.run("DELETE FROM vault_tokens WHERE expires IS NOT NULL AND expires < ?", now)


def policy_body(tx: Tx, name: str) -> str | None:
    raw = tx.value("SELECT body FROM vault_policies WHERE name = ?", name)
    return None if raw is None else str(raw)


def policy(tx: Tx, name: str) -> tuple[str, float, int] | None:
    """(text, last written, version) of a stored policy."""
    row = tx.one("SELECT body, updated, version FROM vault_policies WHERE name = ?", name)
    return None if row is None else (str(row[0]), float(row[1]), int(row[2]))


def policy_bodies(tx: Tx, names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    marks = ", ".join("?" for _ in names)
    return {str(n): str(b) for n, b in tx.all(f"SELECT name, body FROM vault_policies WHERE name IN ({marks})", *names)}


def policy_names(tx: Tx) -> list[str]:
    return [str(n) for (n,) in tx.all("SELECT name FROM vault_policies ORDER BY name")]


def put_policy(tx: Tx, name: str, body: str, now: float) -> None:
    if tx.run("UPDATE vault_policies SET body = ?, updated = ?, version = version + 1 WHERE name = ?", body, now, name) == 0:
        tx.run("INSERT INTO vault_policies (name, body, updated, version) VALUES (?, ?, ?, 1)", name, body, now)


def delete_policy(tx: Tx, name: str) -> int:
    return tx.run("DELETE FROM vault_policies WHERE name = ?", name)


@dataclass(frozen=True)
class KvSettingsRow:
    max_versions: int
    cas_required: int
    delete_version_after: int
    custom_metadata: str
    oldest_version: int
    metadata_version: int


KV_DEFAULTS = KvSettingsRow(0, 0, 0, "{}", 0, 0)
_KV_COLS = st.columns_of(KvSettingsRow, schema.kv_settings)


def kv_settings(tx: Tx, deposit_id: int) -> KvSettingsRow:
    row = tx.one(f"SELECT {_KV_COLS} FROM kv_settings WHERE deposit_id = ?", deposit_id)
    return KvSettingsRow(*row) if row is not None else KV_DEFAULTS


def set_kv_settings(tx: Tx, deposit_id: int, s: KvSettingsRow) -> None:
    values = (s.max_versions, s.cas_required, s.delete_version_after, s.custom_metadata, s.oldest_version, s.metadata_version)
    changed = tx.run(
        "UPDATE kv_settings SET max_versions = ?, cas_required = ?, delete_version_after = ?, custom_metadata = ?, "
        "oldest_version = ?, metadata_version = ? WHERE deposit_id = ?",
        *values,
        deposit_id,
    )
    if changed == 0:
        tx.run(f"INSERT INTO kv_settings (deposit_id, {_KV_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)", deposit_id, *values)


def kv_version_states(tx: Tx, deposit_id: int) -> dict[int, tuple[float | None, bool]]:
    """Version -> (deleted at, destroyed) of the versions deleted or destroyed through KV v2."""
    rows = tx.all("SELECT version, deleted_at, destroyed FROM kv_versions WHERE deposit_id = ?", deposit_id)
    return {int(v): (None if d is None else float(d), bool(x)) for v, d, x in rows}


def kv_version_state(tx: Tx, deposit_id: int, version: int) -> tuple[float | None, bool] | None:
    row = tx.one("SELECT deleted_at, destroyed FROM kv_versions WHERE deposit_id = ? AND version = ?", deposit_id, version)
    return None if row is None else (None if row[0] is None else float(row[0]), bool(row[1]))


def set_kv_version_state(tx: Tx, deposit_id: int, version: int, deleted_at: float | None, destroyed: bool) -> None:
    if deleted_at is None and not destroyed:
        tx.run("DELETE FROM kv_versions WHERE deposit_id = ? AND version = ?", deposit_id, version)
        return
    if tx.run(
        "UPDATE kv_versions SET deleted_at = ?, destroyed = ? WHERE deposit_id = ? AND version = ?",
        deleted_at,
        int(destroyed),
        deposit_id,
        version,
    ) == 0:
        tx.run(
            "INSERT INTO kv_versions (deposit_id, version, deleted_at, destroyed) VALUES (?, ?, ?, ?)",
            deposit_id,
            version,
            deleted_at,
            int(destroyed),
        )


def deposit_names_under(tx: Tx, owner_id: str, prefix: str) -> list[str]:
    """Names of a client's deposits starting with ``prefix`` (a KV v2 list)."""
    # substr, not LIKE: SQLite's LIKE ignores case, and names are case-sensitive.
    rows = tx.all(
        "SELECT name FROM deposits WHERE owner_id = ? AND substr(name, 1, ?) = ? ORDER BY name", owner_id, len(prefix), prefix
    )
    return [str(n) for (n,) in rows]


def count_tokens(tx: Tx, client_id: str) -> int:
    return int(tx.value("SELECT COUNT(*) FROM vault_tokens WHERE client_id = ?", client_id))


def kv_gate(tx: Tx, deposit_id: int, version: int) -> tuple[int, float | None, bool] | None:
    """What KV v2 says of one version before it is read: (oldest version kept, when it is or was
    deleted (by hand or by delete_version_after), destroyed), or None for a deposit KV v2 never
    touched."""
    row = tx.one(
        "SELECT s.oldest_version, s.delete_version_after, "
        "(SELECT deleted_at FROM kv_versions v WHERE v.deposit_id = s.deposit_id AND v.version = ?), "
        "(SELECT destroyed FROM kv_versions v WHERE v.deposit_id = s.deposit_id AND v.version = ?), "
        "(SELECT created FROM deposit_versions v WHERE v.deposit_id = s.deposit_id AND v.version = ?) "
        "FROM kv_settings s WHERE s.deposit_id = ?",
        version,
        version,
        version,
        deposit_id,
    )
    if row is None:
        return None
    oldest, after, deleted_at, destroyed, created = row
    if deleted_at is None and after and created is not None:
        deleted_at = float(created) + int(after)  # delete_version_after: deleted once that old
    return int(oldest), None if deleted_at is None else float(deleted_at), bool(destroyed)


# -- transit keys ------------------------------------------------------------------------------
@dataclass(frozen=True)
class TransitKeyRow:
    id: int
    owner_id: str
    name: str
    type: str
    derived: int
    latest_version: int
    min_decryption_version: int
    min_encryption_version: int
    deletion_allowed: int
    auto_rotate_period: int
    created: float
    rotated: float


_TRANSIT_COLS = st.columns_of(TransitKeyRow, schema.transit_keys)


def transit_key(tx: Tx, owner_id: str, name: str) -> TransitKeyRow | None:
    row = tx.one(f"SELECT {_TRANSIT_COLS} FROM transit_keys WHERE owner_id = ? AND name = ?", owner_id, name)
    return TransitKeyRow(*row) if row is not None else None


def transit_key_names(tx: Tx, owner_id: str) -> list[str]:
    return [str(n) for (n,) in tx.all("SELECT name FROM transit_keys WHERE owner_id = ? ORDER BY name", owner_id)]


def insert_transit_key(tx: Tx, owner_id: str, name: str, kind: str, derived: bool, auto_rotate: int, now: float) -> int:
    return int(
        tx.value(
            "INSERT INTO transit_keys (owner_id, name, type, derived, latest_version, min_decryption_version, "
            "min_encryption_version, deletion_allowed, auto_rotate_period, created, rotated) "
            "VALUES (?, ?, ?, ?, 1, 1, 0, 0, ?, ?, ?) RETURNING id",
            owner_id,
            name,
            kind,
            int(derived),
            auto_rotate,
            now,
            now,
        )
    )


def set_transit_config(
    tx: Tx, key_id: int, min_decryption: int, min_encryption: int, deletion_allowed: bool, auto_rotate: int
) -> None:
    tx.run(
        "UPDATE transit_keys SET min_decryption_version = ?, min_encryption_version = ?, deletion_allowed = ?, "
        "auto_rotate_period = ? WHERE id = ?",
        min_decryption,
        min_encryption,
        int(deletion_allowed),
        auto_rotate,
        key_id,
    )


def set_transit_latest(tx: Tx, key_id: int, version: int, now: float) -> None:
    tx.run("UPDATE transit_keys SET latest_version = ?, rotated = ? WHERE id = ?", version, now, key_id)


def delete_transit_key(tx: Tx, key_id: int) -> None:
    tx.run("DELETE FROM transit_key_versions WHERE key_id = ?", key_id)
    tx.run("DELETE FROM transit_keys WHERE id = ?", key_id)


def transit_version_times(tx: Tx, key_id: int) -> dict[int, float]:
    return {int(v): float(t) for v, t in tx.all("SELECT version, created FROM transit_key_versions WHERE key_id = ?", key_id)}


def insert_transit_version(tx: Tx, key_id: int, version: int, master_gen: int, wrapped: bytes, created: float) -> None:
    tx.run(
        "INSERT INTO transit_key_versions (key_id, version, master_gen, wrapped, created) VALUES (?, ?, ?, ?, ?)",
        key_id,
        version,
        master_gen,
        wrapped,
        created,
    )


def transit_versions(tx: Tx, key_id: int, versions: list[int]) -> list[tuple[int, int, bytes]]:
    """(version, master generation, wrapped material) of the asked versions that exist."""
    if not versions:
        return []
    marks = ", ".join("?" for _ in versions)
    rows = tx.all(
        f"SELECT version, master_gen, wrapped FROM transit_key_versions WHERE key_id = ? AND version IN ({marks})",
        key_id,
        *versions,
    )
    return [(int(v), int(g), bytes(w)) for v, g, w in rows]


def transit_version_keys(tx: Tx) -> list[tuple[int, int, bytes, str, str]]:
    """(key id, version, wrapped material, owner, type) of every transit key version, for a rotation."""
    rows = tx.all(
        "SELECT v.key_id, v.version, v.wrapped, k.owner_id, k.type "
        "FROM transit_key_versions v JOIN transit_keys k ON k.id = v.key_id"
    )
    return [(int(k), int(v), bytes(w), str(o), str(t)) for k, v, w, o, t in rows]


def set_transit_version_key(tx: Tx, key_id: int, version: int, master_gen: int, wrapped: bytes) -> None:
    tx.run(
        "UPDATE transit_key_versions SET master_gen = ?, wrapped = ? WHERE key_id = ? AND version = ?",
        master_gen,
        wrapped,
        key_id,
        version,
    )


_TOKEN_COLS_T = ", ".join("t." + c for c in _TOKEN_COLS.split(", "))
_CLIENT_COLS_C = ", ".join("c." + c for c in _CLIENT_COLS.split(", "))


def token_and_client(tx: Tx, token_hash: bytes) -> tuple[TokenRow, ClientRow | None] | None:
    """A token and the client it acts for (None if that client is gone), in one statement: every
    request with a token starts here."""
    row = tx.one(
        f"SELECT {_TOKEN_COLS_T}, {_CLIENT_COLS_C} FROM vault_tokens t LEFT JOIN clients c ON c.id = t.client_id "
        "WHERE t.token_hash = ?",
        token_hash,
    )
    if row is None:
        return None
    n = len(TokenRow.__dataclass_fields__)
    c = row[n:]
    client = ClientRow(c[0], c[1], c[2], c[3], c[4], bytes(c[5])) if c[0] is not None else None
    return TokenRow(*row[:n]), client


_KV_COLS_S = ", ".join("s." + c for c in _KV_COLS.split(", "))


def kv_version_read(
    tx: Tx, owner_id: str, name: str, version: int | None
) -> tuple[DepositRow, KvSettingsRow, int, float | None, tuple[float | None, bool] | None] | None:
    """What a KV read needs of one version, in one statement: (deposit, KV settings or their
    defaults, the version, its creation time if its row is kept, its (deleted at, destroyed) if
    KV v2 deleted or destroyed it); None for no such deposit."""
    n_dep = len(DepositRow.__dataclass_fields__)
    row = tx.one(
        f"SELECT {_DEPOSIT_COLS_D}, {_KV_COLS_S}, s.deposit_id, v.created, k.deleted_at, k.destroyed "
        "FROM deposits d LEFT JOIN kv_settings s ON s.deposit_id = d.id "
        "LEFT JOIN deposit_versions v ON v.deposit_id = d.id AND v.version = COALESCE(?, d.latest_version) "
        "LEFT JOIN kv_versions k ON k.deposit_id = d.id AND k.version = COALESCE(?, d.latest_version) "
        "WHERE d.owner_id = ? AND d.name = ?",
        version,
        version,
        owner_id,
        name,
    )
    if row is None:
        return None
    dep = DepositRow(*row[:n_dep])
    n_kv = len(KvSettingsRow.__dataclass_fields__)
    settings_row = row[n_dep : n_dep + n_kv]
    has_settings, created, deleted_at, destroyed = row[n_dep + n_kv :]
    settings = KvSettingsRow(*settings_row) if has_settings is not None else KV_DEFAULTS
    state = None if destroyed is None else (None if deleted_at is None else float(deleted_at), bool(destroyed))
    v = version if version is not None else dep.latest_version
    return dep, settings, v, None if created is None else float(created), state


def transit_key_and_version(
    tx: Tx, owner_id: str, name: str, version: int | None
) -> tuple[TransitKeyRow, tuple[int, int, bytes] | None] | None:
    """A transit key and one of its versions' (version, master generation, wrapped material), the
    latest when ``version`` is None, in one statement (the version part None if there is no such
    version)."""
    cols = ", ".join("k." + c for c in _TRANSIT_COLS.split(", "))
    row = tx.one(
        f"SELECT {cols}, v.version, v.master_gen, v.wrapped FROM transit_keys k "
        "LEFT JOIN transit_key_versions v ON v.key_id = k.id AND v.version = COALESCE(?, k.latest_version) "
        "WHERE k.owner_id = ? AND k.name = ?",
        version,
        owner_id,
        name,
    )
    if row is None:
        return None
    n = len(TransitKeyRow.__dataclass_fields__)
    v, gen, wrapped = row[n:]
    return TransitKeyRow(*row[:n]), None if v is None else (int(v), int(gen), bytes(wrapped))
