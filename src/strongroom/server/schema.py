"""The database schema, as SQLAlchemy tables: one definition for SQLite and PostgreSQL, used for
the DDL (storage.py creates and upgrades it) and for the backup's table list (backup.py).
Queries do not go through these objects (storage.Tx runs SQL)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from strongroom.crypto import reqsig

NONCE_MEMORY_SECONDS = 2 * reqsig.MAX_SKEW_SECONDS  # a seen request is remembered for twice the signature window

metadata = MetaData()

# The schema's version, kept in meta as schema_version (absent: 1).  1: the releases up to
# 1ec363f; 2: pending_shares, the seal record, unseal_gen, release approvals; 3: kmip_objects
# (tests/server/test_upgrade.py upgrades a database that release made, under load from a server
# of that release).  A server refuses to
# start on a database of a higher version.
SCHEMA_VERSION = 3

meta = Table(
    "meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

master_keys = Table(
    "master_keys",
    metadata,
    Column("generation", Integer, primary_key=True, autoincrement=False),
    Column("wrapped", LargeBinary, nullable=False),  # under the unseal key
    Column("created", Float, nullable=False),
)

system_keys = Table(
    "system_keys",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("master_gen", Integer, nullable=False),
    Column("wrapped", LargeBinary, nullable=False),  # under the master key
)

orgs = Table(
    "orgs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False, unique=True),
    Column("secret_hash", LargeBinary, nullable=False),
    Column("created", Float, nullable=False),
)

clients = Table(
    "clients",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("org_id", Integer, ForeignKey("orgs.id"), nullable=True),
    Column("name", String(128), nullable=False),
    Column("public_key", LargeBinary, nullable=False, unique=True),
    Column("role", String(16), nullable=False),  # client | admin
    Column("status", String(16), nullable=False),  # active | disabled | revoked
    Column("created", Float, nullable=False),
)

groups = Table(
    "groups",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("org_id", Integer, ForeignKey("orgs.id"), nullable=False),
    Column("name", String(64), nullable=False),
    UniqueConstraint("org_id", "name"),
)

group_members = Table(
    "group_members",
    metadata,
    Column("group_id", Integer, ForeignKey("groups.id", ondelete="CASCADE"), primary_key=True),
    Column("client_id", String(32), ForeignKey("clients.id"), primary_key=True),
)

deposits = Table(
    "deposits",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("owner_id", String(32), ForeignKey("clients.id"), nullable=False),
    Column("name", String(128), nullable=False),
    Column("latest_version", Integer, nullable=False),
    Column("expires_at", Float, nullable=True),
    Column("not_before", Float, nullable=True),
    Column("max_retrievals", Integer, nullable=True),
    Column("retrievals", Integer, nullable=False),
    Column("created", Float, nullable=False),
    Column("updated", Float, nullable=False),
    # M of the deposit's approvers must approve each retrieval (0: no approval needed), or
    # open a window of this many seconds for the requester (0: one retrieval per approval)
    Column("approvals_required", Integer, nullable=False, server_default="0"),
    Column("approval_window", Integer, nullable=False, server_default="0"),
    UniqueConstraint("owner_id", "name"),
)

deposit_readers = Table(
    "deposit_readers",
    metadata,
    Column("deposit_id", Integer, ForeignKey("deposits.id", ondelete="CASCADE"), primary_key=True),
    Column("kind", String(8), primary_key=True),  # client | group
    Column("principal", String(64), primary_key=True),
)

deposit_versions = Table(
    "deposit_versions",
    metadata,
    Column("deposit_id", Integer, ForeignKey("deposits.id", ondelete="CASCADE"), primary_key=True),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("master_gen", Integer, nullable=False),
    Column("wrapped_key", LargeBinary, nullable=False),
    Column("ciphertext", LargeBinary, nullable=False),
    Column("created", Float, nullable=False),
)

# Requests seen in the replay window, keyed by (timestamp, nonce, client): the timestamp is signed,
# so a replay repeats all three. Timestamp first, and clients whose nonces start with the time
# (ours do), make inserts land at the right edge of one b-tree and expiry a range delete at its
# left edge: a batch of requests dirties one or two pages, where a random (client, nonce) key
# with a rowid and an expiry index dirtied about ten (measured: git show 7c4ab38:docs/BENCHMARKS.md).
seen_nonces = Table(
    "seen_nonces",
    metadata,
    Column("ts", BigInteger, primary_key=True, autoincrement=False),
    Column("nonce", String(64), primary_key=True),
    Column("client_id", String(32), primary_key=True),
    sqlite_with_rowid=False,
)

# Wrong registration secrets by source address, in the database so that every worker and every
# server on it counts the same failures (a sliding minute: service.py).
registration_failures = Table(
    "registration_failures",
    metadata,
    Column("source", String(64), nullable=False),
    Column("at", Float, nullable=False),
    Index("registration_failures_by_source", "source", "at"),
)

# Refusals that happen while the server is sealed, when no audit entry can be chained (the audit
# MAC key is under the master key): the next unseal moves them into the chain, with their time.
sealed_events = Table(
    "sealed_events",
    metadata,
    Column("ts", Float, nullable=False),
    Column("actor", String(64), nullable=False),
    Column("action", String(32), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("detail", Text, nullable=False),
)
MAX_SEALED_EVENTS = 10_000

audit = Table(
    "audit",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("ts", Float, nullable=False),
    Column("actor", String(64), nullable=False),
    Column("action", String(32), nullable=False),
    Column("target", String(256), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("detail", Text, nullable=False),
    Column("mac", LargeBinary, nullable=False),
)

audit_head = Table(
    "audit_head",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("seq", Integer, nullable=False),
    Column("mac", LargeBinary, nullable=False),
)

nodes = Table(
    "nodes",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("public_key", LargeBinary, nullable=False),
    Column("tag", LargeBinary, nullable=False),
    Column("heartbeat", Float, nullable=False),
)

grants = Table(
    "grants",
    metadata,
    Column("node_id", String(32), primary_key=True),
    Column("epoch", Integer, primary_key=True, autoincrement=False),
    Column("box", LargeBinary, nullable=False),
)

# Who may approve a deposit's release (approvals.py): clients and groups, as readers are named.
deposit_approvers = Table(
    "deposit_approvers",
    metadata,
    Column("deposit_id", Integer, ForeignKey("deposits.id", ondelete="CASCADE"), primary_key=True),
    Column("kind", String(8), primary_key=True),  # client | group
    Column("principal", String(64), primary_key=True),
)

# A retrieval waiting for (or granted by) its approvals: pending, approved, used, denied,
# cancelled (the policy changed); expired ones are pending or approved past ``expires``.
approval_requests = Table(
    "approval_requests",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("deposit_id", Integer, ForeignKey("deposits.id", ondelete="CASCADE"), nullable=False),
    Column("requester_id", String(32), nullable=False),
    Column("state", String(12), nullable=False),
    Column("created", Float, nullable=False),
    Column("expires", Float, nullable=False),  # pending: until decided; approved: until used
    Column("window_until", Float, nullable=True),  # an approved window's end
    Column("used_at", Float, nullable=True),
    Index("approval_requests_requester", "deposit_id", "requester_id", "state"),
)

approval_votes = Table(
    "approval_votes",
    metadata,
    Column("request_id", String(32), ForeignKey("approval_requests.id", ondelete="CASCADE"), primary_key=True),
    Column("approver_id", String(32), primary_key=True),
    Column("approve", Integer, nullable=False),
    Column("at", Float, nullable=False),
)

APPROVAL_TABLES = (deposit_approvers, approval_requests, approval_votes)

# Shares given towards an unseal or a rekey (unsealing.py), each sealed to every live server
# process's box key: one row per share and process.
pending_shares = Table(
    "pending_shares",
    metadata,
    Column("purpose", String(16), primary_key=True),
    Column("share_index", Integer, primary_key=True, autoincrement=False),
    Column("node_id", String(32), primary_key=True),
    Column("box", LargeBinary, nullable=False),
    Column("given_by", String(32), nullable=False),
    Column("created", Float, nullable=False),
)


# -- the Vault-compatible surface (server/vault) -------------------------------------------------
# Tokens are stored by a hash of the token (256 random bits, so a plain hash suffices); the
# accessor names a token without being able to use it.
vault_tokens = Table(
    "vault_tokens",
    metadata,
    Column("accessor", String(32), primary_key=True),
    Column("token_hash", LargeBinary, nullable=False, unique=True),
    Column("client_id", String(32), ForeignKey("clients.id"), nullable=False),
    Column("parent", String(32), nullable=True),  # the accessor of the token that made it
    Column("policies", Text, nullable=False),  # JSON list of policy names
    Column("display_name", String(128), nullable=False),
    Column("meta", Text, nullable=False),  # JSON object of strings, shown by lookup
    Column("created", Float, nullable=False),
    Column("expires", Float, nullable=True),  # None: never (root-style tokens)
    Column("period", Integer, nullable=False),  # seconds a renewal extends by
    Column("max_expires", Float, nullable=True),  # no renewal goes past this
    Column("uses_left", Integer, nullable=False),  # 0: unlimited
    Column("renewable", Integer, nullable=False),
    Column("explicit_max_ttl", Integer, nullable=False, server_default="0"),  # seconds asked for; 0: none
    Index("vault_tokens_client", "client_id"),
    Index("vault_tokens_parent", "parent"),
)

vault_policies = Table(
    "vault_policies",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("body", Text, nullable=False),  # the policy text as written (HCL or JSON)
    Column("updated", Float, nullable=False),
    Column("version", Integer, nullable=False),  # writes so far
)

# KV v2 settings of a deposit written through the Vault API (defaults when absent).
kv_settings = Table(
    "kv_settings",
    metadata,
    Column("deposit_id", Integer, ForeignKey("deposits.id", ondelete="CASCADE"), primary_key=True),
    Column("max_versions", Integer, nullable=False),  # 0: the mount's default
    Column("cas_required", Integer, nullable=False),
    Column("delete_version_after", Integer, nullable=False),  # seconds, 0: never
    Column("custom_metadata", Text, nullable=False),  # JSON object of strings
    Column("oldest_version", Integer, nullable=False),  # versions below were pruned by max_versions
    Column("metadata_version", Integer, nullable=False),  # metadata writes so far
)

# Versions deleted (recoverable) or destroyed (content and key gone) through KV v2; a version
# with no row here is live.
kv_versions = Table(
    "kv_versions",
    metadata,
    Column("deposit_id", Integer, ForeignKey("deposits.id", ondelete="CASCADE"), primary_key=True),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("deleted_at", Float, nullable=True),
    Column("destroyed", Integer, nullable=False),
)

# Transit keys: named per client, each version's material sealed by the barrier.
transit_keys = Table(
    "transit_keys",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("owner_id", String(32), ForeignKey("clients.id"), nullable=False),
    Column("name", String(128), nullable=False),
    Column("type", String(32), nullable=False),
    Column("derived", Integer, nullable=False),
    Column("latest_version", Integer, nullable=False),
    Column("min_decryption_version", Integer, nullable=False),
    Column("min_encryption_version", Integer, nullable=False),
    Column("deletion_allowed", Integer, nullable=False),
    Column("auto_rotate_period", Integer, nullable=False),  # seconds, 0: never
    Column("created", Float, nullable=False),
    Column("rotated", Float, nullable=False),
    UniqueConstraint("owner_id", "name"),
)

transit_key_versions = Table(
    "transit_key_versions",
    metadata,
    Column("key_id", Integer, ForeignKey("transit_keys.id", ondelete="CASCADE"), primary_key=True),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("master_gen", Integer, nullable=False),
    Column("wrapped", LargeBinary, nullable=False),  # the key material under the master key
    Column("created", Float, nullable=False),
)

VAULT_TABLES = (vault_tokens, vault_policies, kv_settings, kv_versions, transit_keys, transit_key_versions)


# KMIP managed objects: each is a deposit (its material sealed in deposit_versions like any
# other) with KMIP's identity, type, state and attributes here, in the clear as PyKMIP and
# every KMIP server keep them, so Locate can search them.
kmip_objects = Table(
    "kmip_objects",
    metadata,
    Column("deposit_id", Integer, ForeignKey("deposits.id", ondelete="CASCADE"), primary_key=True, autoincrement=False),
    Column("uid", String(64), nullable=False, unique=True),
    Column("object_type", Integer, nullable=False),
    Column("state", Integer, nullable=False),
    Column("attrs", Text, nullable=False),  # JSON: [[name, hex of the value's TTLV], ...]
    Column("created", Float, nullable=False),
)
