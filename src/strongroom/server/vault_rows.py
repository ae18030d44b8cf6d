"""Every SQL statement on the Vault-compatible surface's tables -- tokens, ACL policies, KV v2
state and Transit keys -- as repository.py holds the rest (the same rules: one function per
statement, row types checked against the schema, the transaction first, no commit).  Transit key
versions hold only wrapped key material, and only the barrier calls their functions."""

from __future__ import annotations

from dataclasses import dataclass

from strongroom.server import schema
from strongroom.server import storage as st
from strongroom.server.repository import _CLIENT_COLS, _DEPOSIT_COLS_D, ClientRow, DepositRow
from strongroom.server.storage import Tx


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
    explicit_max_ttl: int = 0  # as asked at creation (reported by lookup); 0: none asked


_TOKEN_COLS = st.columns_of(TokenRow, schema.vault_tokens)


def token_by_accessor(tx: Tx, accessor: str) -> TokenRow | None:
    row = tx.one(f"SELECT {_TOKEN_COLS} FROM vault_tokens WHERE accessor = ?", accessor)
    return TokenRow(*row) if row is not None else None


def insert_token(tx: Tx, t: TokenRow, token_hash: bytes) -> None:
    tx.run(
        f"INSERT INTO vault_tokens ({_TOKEN_COLS}, token_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        t.explicit_max_ttl,
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


def orphan_children(tx: Tx, accessor: str) -> None:
    """The tokens made from ``accessor`` lose their parent (revoke-orphan keeps them alive)."""
    tx.run("UPDATE vault_tokens SET parent = NULL WHERE parent = ?", accessor)


def live_token_accessors(tx: Tx, client_id: str, now: float) -> list[str]:
    rows = tx.all(
        "SELECT accessor FROM vault_tokens WHERE client_id = ? AND (expires IS NULL OR expires > ?) ORDER BY accessor",
        client_id,
        now,
    )
    return [str(a) for (a,) in rows]


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
    if (
        tx.run(
            "UPDATE kv_versions SET deleted_at = ?, destroyed = ? WHERE deposit_id = ? AND version = ?",
            deleted_at,
            int(destroyed),
            deposit_id,
            version,
        )
        == 0
    ):
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
    """What KV v2 says of one version before it is read: (oldest version kept, when it is, was or
    will be deleted (by hand, or stamped at its write by delete_version_after), destroyed), or
    None for a deposit KV v2 never touched."""
    row = tx.one(
        "SELECT s.oldest_version, "
        "(SELECT deleted_at FROM kv_versions v WHERE v.deposit_id = s.deposit_id AND v.version = ?), "
        "(SELECT destroyed FROM kv_versions v WHERE v.deposit_id = s.deposit_id AND v.version = ?) "
        "FROM kv_settings s WHERE s.deposit_id = ?",
        version,
        version,
        deposit_id,
    )
    if row is None:
        return None
    oldest, deleted_at, destroyed = row
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
