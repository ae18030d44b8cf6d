"""Storage backend: one schema and one code path for SQLite (WAL) and PostgreSQL (psycopg 3).

Every audited action runs in ``Store.action()``: a transaction that first locks the
audit chain head.  That one lock serializes writers across processes on PostgreSQL
(SQLite serializes writers by itself with BEGIN IMMEDIATE), which is what makes
retrieval counts exact and the audit chain linear.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sqlalchemy import (
    Column,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    select,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from strongroom.server.errors import StorageUnavailable

SCHEMA_VERSION = "1"

metadata = MetaData()

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

nonces = Table(
    "nonces",
    metadata,
    Column("client_id", String(32), primary_key=True),
    Column("nonce", String(64), primary_key=True),
    Column("expires", Float, nullable=False, index=True),
)

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


def normalize_url(url: str) -> str:
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        # NullPool: a fresh connection per transaction is cheap for SQLite and avoids
        # sharing connections across threads; pragmas are applied on every connect.
        engine = create_engine(
            url,
            poolclass=NullPool,
            connect_args={"check_same_thread": False, "timeout": 5, "isolation_level": None},
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _rec: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")  # an acknowledged commit survives power loss
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Connection) -> None:
            # Take the write lock up front: no deferred-to-write upgrade that can fail busy.
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    if url.startswith("postgresql+psycopg"):
        engine = create_engine(
            url,
            pool_pre_ping=True,
            pool_size=8,
            max_overflow=8,
            pool_timeout=10,
            connect_args={"connect_timeout": 5},
        )

        @event.listens_for(engine, "connect")
        def _pg_settings(dbapi_conn: Any, _rec: Any) -> None:
            with dbapi_conn.cursor() as cur:
                cur.execute("SET synchronous_commit = on")
                cur.execute("SET lock_timeout = '20s'")
            dbapi_conn.commit()

        return engine
    raise ValueError("database URL must start with sqlite:/// or postgresql://")


class Store:
    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.engine = make_engine(url)
        self.is_sqlite = self.url.startswith("sqlite")

    def create_schema(self) -> None:
        with self.wrap_errors():
            metadata.create_all(self.engine)

    @contextlib.contextmanager
    def wrap_errors(self) -> Iterator[None]:
        try:
            yield
        except DBAPIError as e:
            if e.connection_invalidated or _is_transient(e):
                # The driver's first line says what failed (refused, locked, no such file);
                # it carries no request content or key material.
                detail = (
                    str(e.orig).strip().splitlines()[0][:200] if e.orig is not None and str(e.orig).strip() else "database error"
                )
                raise StorageUnavailable(detail) from None
            raise

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        with self.wrap_errors(), self.engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def action(self) -> Iterator[tuple[Connection, int, bytes]]:
        """A write transaction holding the audit head lock: yields (conn, head_seq, head_mac)."""
        with self.wrap_errors(), self.engine.begin() as conn:
            row = conn.execute(select(audit_head.c.seq, audit_head.c.mac).where(audit_head.c.id == 1).with_for_update()).one()
            yield conn, row.seq, row.mac

    def dispose(self) -> None:
        self.engine.dispose()


def _is_transient(e: DBAPIError) -> bool:
    orig = e.orig
    name = type(orig).__name__ if orig is not None else ""
    if name in {"OperationalError", "InterfaceError"}:
        text = str(orig).lower()
        # Constraint and syntax problems are bugs, not outages: let those surface.
        return not ("syntax" in text or "no such table" in text or "no such column" in text)
    return False


def get_meta(conn: Connection, key: str) -> str | None:
    v = conn.execute(select(meta.c.value).where(meta.c.key == key)).scalar_one_or_none()
    return v


def set_meta(conn: Connection, key: str, value: str) -> None:
    if get_meta(conn, key) is None:
        conn.execute(meta.insert().values(key=key, value=value))
    else:
        conn.execute(meta.update().where(meta.c.key == key).values(value=value))
