"""Storage backend: one schema and one code path for SQLite (WAL) and PostgreSQL (psycopg 3).

SQLAlchemy owns the schema (DDL) and the connection pools; queries go through ``Tx``, a thin
wrapper over the DB-API connection, because SQLAlchemy's per-statement overhead (~60 µs) was
most of a request's cost (raw sqlite3: ~5 µs).  SQL is written once with ``?`` placeholders.

Every audited action runs in ``Store.action()``: a transaction that first locks the audit
chain head.  That one lock serializes writers across processes on PostgreSQL (SQLite
serializes writers by itself with BEGIN IMMEDIATE), which is what makes retrieval counts
exact and the audit chain linear.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from sqlalchemy import Table, create_engine, event
from sqlalchemy.engine import Engine

from strongroom.server.errors import BadRequest, SchemaTooNew, StorageUnavailable
from strongroom.server.schema import (
    APPROVAL_TABLES,
    NONCE_MEMORY_SECONDS,
    SCHEMA_VERSION,
    VAULT_TABLES,
    kmip_objects,
    metadata,
    pending_shares,
    registration_failures,
    sealed_events,
    seen_nonces,
)

INTEGRITY_ERRORS: tuple[type[Exception], ...] = (sqlite3.IntegrityError, psycopg.IntegrityError)
OUTAGE_ERRORS: tuple[type[Exception], ...] = (sqlite3.OperationalError, psycopg.OperationalError, psycopg.InterfaceError)


def normalize_url(url: str) -> str:
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _private_files(db_file: str) -> None:
    """The SQLite database and its WAL and shared-memory files are private (0600): created so
    before SQLite opens it (which would use 0644 under a usual umask; SQLite gives the WAL and
    shm files the database's mode), and tightened if an earlier version left them wider."""
    try:
        os.close(os.open(db_file, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        return  # SQLite will say what is wrong with the path
    for path in (db_file, db_file + "-wal", db_file + "-shm"):
        try:
            st = os.stat(path)
            if st.st_mode & 0o077 and st.st_uid == os.geteuid():
                os.chmod(path, 0o600)
        except OSError:
            continue


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            pool_size=16,
            max_overflow=16,
            connect_args={"check_same_thread": False, "timeout": 5, "isolation_level": None},
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _rec: Any) -> None:
            for pragma in (
                "PRAGMA journal_mode=WAL",
                "PRAGMA synchronous=FULL",  # an acknowledged commit survives power loss
                "PRAGMA foreign_keys=ON",
                "PRAGMA busy_timeout=5000",  # a stuck lock answers 503, not a hang
            ):
                dbapi_conn.execute(pragma)

        return engine
    if url.startswith("postgresql+psycopg"):
        engine = create_engine(
            url,
            pool_pre_ping=True,
            pool_size=16,
            max_overflow=16,
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


def _nul() -> BadRequest:
    """A text value held a NUL: PostgreSQL cannot store one (it failed there as a 500 while
    SQLite kept it), so both databases refuse it alike (400), whatever request field it came
    from.  The check is written out in each method below: it runs on every statement."""
    return BadRequest("text may not contain NUL characters")


class Tx:
    """One transaction on one DB-API connection; SQL uses ``?`` placeholders on both databases."""

    __slots__ = ("_conn", "_pg", "_sp")
    _pg_cache: dict[str, str] = {}

    def __init__(self, dbapi_conn: Any, pg: bool) -> None:
        self._conn = dbapi_conn
        self._pg = pg
        self._sp = 0

    def _sql(self, sql: str) -> str:
        if not self._pg:
            return sql
        q = self._pg_cache.get(sql)
        if q is None:
            q = self._pg_cache[sql] = sql.replace("?", "%s")
        return q

    def all(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        for p in params:
            if type(p) is str and "\x00" in p:
                raise _nul()
        return list(self._conn.execute(self._sql(sql), params).fetchall())

    def one(self, sql: str, *params: Any) -> tuple[Any, ...] | None:
        for p in params:
            if type(p) is str and "\x00" in p:
                raise _nul()
        row = self._conn.execute(self._sql(sql), params).fetchone()
        return tuple(row) if row is not None else None

    def value(self, sql: str, *params: Any) -> Any:
        row = self.one(sql, *params)
        return row[0] if row is not None else None

    def run(self, sql: str, *params: Any) -> int:
        """Execute; returns the number of rows changed."""
        for p in params:
            if type(p) is str and "\x00" in p:
                raise _nul()
        return int(self._conn.execute(self._sql(sql), params).rowcount)

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        for row in rows:
            for p in row:
                if type(p) is str and "\x00" in p:
                    raise _nul()
        if self._pg:
            with self._conn.cursor() as cur:
                cur.executemany(self._sql(sql), rows)
        else:
            self._conn.executemany(sql, rows)

    def columns(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        cur = self._conn.execute(self._sql(sql))
        return [d[0] for d in cur.description], list(cur.fetchall())

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """Undo only this block on error; the transaction goes on."""
        self._sp += 1
        name = f"sp{self._sp}"
        self._conn.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            self._conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
            self._conn.execute(f"RELEASE SAVEPOINT {name}")
            raise
        self._conn.execute(f"RELEASE SAVEPOINT {name}")


class Store:
    def __init__(self, url: str, pinned: bool = False) -> None:
        """``pinned``: keep one connection for every transaction instead of the pool's checkout,
        return and reset per transaction (~10 % of the writer process's time); only for a store
        used by one thread at a time, such as the writer process's."""
        self._pinned = pinned
        self._conn: Any = None
        self.url = normalize_url(url)
        self.engine = make_engine(url)
        self.is_sqlite = self.url.startswith("sqlite")
        db_file = self.engine.url.database if self.is_sqlite else None
        self.database_file = db_file if db_file and db_file != ":memory:" else None  # what a commit flushes
        # SQLite writers (threads and processes) queue on this file lock instead of in
        # SQLite's busy handler, which sleeps 1..100 ms between retries and wrecked latency.
        self._write_lock = f"{db_file}.lock" if db_file and db_file != ":memory:" else None
        if db_file and db_file != ":memory:":
            _private_files(db_file)

    @contextlib.contextmanager
    def _writer_turn(self) -> Iterator[None]:
        if self._write_lock is None:
            yield
            return
        fd = os.open(self._write_lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            # Blocking: the kernel wakes the next writer at once (polling with sleeps let one
            # process starve the other).  Requests waiting on it are bounded by the API's
            # request timeout, so a stuck writer yields 503s, not hung clients.
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def create_schema(self) -> None:
        with self.wrap_errors():
            metadata.create_all(self.engine)

    def schema_version(self) -> int:
        """The database's schema version (meta ``schema_version``; 1 before it was recorded)."""
        with self.wrap_errors(), self.engine.connect() as conn:
            row = conn.exec_driver_sql("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            return 1
        try:
            return int(row[0])
        except ValueError:
            raise SchemaTooNew(f"the database's schema version {row[0]!r} is not one this release knows") from None

    def check_schema_version(self) -> int:
        version = self.schema_version()
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"the database's schema is version {version}, newer than this release's {SCHEMA_VERSION}: "
                "a newer Strongroom upgraded it; run that release (or newer)"
            )
        return version

    def upgrade_schema(self) -> None:
        """Bring a database made by an earlier version up to this schema, at server start;
        SchemaTooNew if a newer release made or upgraded it.

        Idempotent, and safe when several server processes start on one database at once: a
        step another process finished first fails here and is checked again.  Every step only
        adds (tables, nullable or defaulted columns), so a server of the previous release on the
        same database keeps working while and after this runs.
        """
        from sqlalchemy import inspect
        from sqlalchemy.exc import DBAPIError

        if self.check_schema_version() == SCHEMA_VERSION:
            return

        added_tables = (registration_failures, sealed_events, pending_shares, *APPROVAL_TABLES, *VAULT_TABLES, kmip_objects)
        for added in added_tables:  # tables later versions added
            for _attempt in range(3):
                try:
                    with self.wrap_errors():
                        added.create(self.engine, checkfirst=True)
                    break
                except (DBAPIError, StorageUnavailable):
                    continue  # another process got there first: look again
        for table, column, ddl in ADDED_COLUMNS:  # columns later versions added to existing tables
            for _attempt in range(3):
                with self.wrap_errors():
                    have = {c["name"] for c in inspect(self.engine).get_columns(table)}
                if column in have:
                    break
                try:
                    with self.wrap_errors(), self.exclusive() as tx:
                        tx.run(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}")
                except (DBAPIError, StorageUnavailable):
                    continue  # another process got there first: look again
        for _attempt in range(3):
            with self.wrap_errors():
                names = set(inspect(self.engine).get_table_names())
            if "seen_nonces" in names and "nonces" not in names:
                break
            try:
                with self.wrap_errors():
                    seen_nonces.create(self.engine, checkfirst=True)
                    if "nonces" in names:
                        # the old table kept (client, nonce, expires = timestamp + 600 s): lossless
                        with self.exclusive() as tx:
                            tx.run(
                                "INSERT INTO seen_nonces (ts, nonce, client_id) "
                                "SELECT CAST(expires AS BIGINT) - ?, nonce, client_id FROM nonces WHERE true "
                                "ON CONFLICT DO NOTHING",
                                NONCE_MEMORY_SECONDS,
                            )
                            tx.run("DROP TABLE IF EXISTS nonces")
            except (DBAPIError, StorageUnavailable):
                continue  # another process got there first: look again
        with self.wrap_errors():
            names = set(inspect(self.engine).get_table_names())
        if "seen_nonces" not in names or "nonces" in names:
            raise StorageUnavailable("could not upgrade the database schema (replay table)")
        if not {t.name for t in added_tables} <= names:
            raise StorageUnavailable("could not upgrade the database schema (tables added since)")
        with self.wrap_errors(), self.exclusive() as tx:
            recorded = int(tx.value("SELECT value FROM meta WHERE key = 'schema_version'") or 1)
            update = "UPDATE meta SET value = ? WHERE key = 'schema_version'"
            if recorded < SCHEMA_VERSION and tx.run(update, str(SCHEMA_VERSION)) == 0:
                tx.run("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", str(SCHEMA_VERSION))

    def has_schema(self) -> bool:
        from sqlalchemy import inspect

        with self.wrap_errors():
            return bool(inspect(self.engine).has_table("meta"))

    @contextlib.contextmanager
    def wrap_errors(self) -> Iterator[None]:
        from sqlalchemy.exc import DBAPIError

        try:
            yield
        except DBAPIError as e:
            if e.connection_invalidated or isinstance(e.orig, OUTAGE_ERRORS):
                raise StorageUnavailable(_first_line(e.orig)) from None
            raise
        except OUTAGE_ERRORS as e:
            raise StorageUnavailable(_first_line(e)) from None

    @contextlib.contextmanager
    def transaction(self, begin: str | None = None) -> Iterator[Tx]:
        """A transaction: committed if the block ends normally, rolled back otherwise."""
        writer = self._writer_turn() if begin is None else contextlib.nullcontext()
        with self.wrap_errors(), writer:
            raw = self._conn or self.engine.raw_connection()
            if self._pinned:
                self._conn = raw
            try:
                dbapi: Any = raw.driver_connection
                if self.is_sqlite:
                    dbapi.execute(begin or "BEGIN IMMEDIATE")  # take the write lock up front
                elif begin:
                    dbapi.execute(begin)
                try:
                    yield Tx(dbapi, not self.is_sqlite)
                except BaseException:
                    if not self.is_sqlite:
                        dbapi.rollback()
                    elif dbapi.in_transaction:  # SQLite may already have rolled back (disk full, I/O error)
                        dbapi.execute("ROLLBACK")
                    raise
                if self.is_sqlite:
                    dbapi.execute("COMMIT")
                else:
                    dbapi.commit()
            except OUTAGE_ERRORS:
                self._conn = None
                raw.invalidate()  # a broken connection must not go back to the pool
                raise
            finally:
                if raw is not self._conn:
                    raw.close()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[Tx]:
        """A transaction that holds the writers' turn (SQLite: the lock file and BEGIN IMMEDIATE):
        for writes outside an audited action, and reads that must not interleave with one."""
        with self.transaction() as tx:
            yield tx

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Tx]:
        """One consistent view of every table that does not block writers for long."""
        with self.transaction("BEGIN" if self.is_sqlite else "BEGIN ISOLATION LEVEL REPEATABLE READ") as tx:
            yield tx

    @contextlib.contextmanager
    def action(self) -> Iterator[tuple[Tx, int, bytes]]:
        """A write transaction holding the audit head lock: yields (tx, head_seq, head_mac)."""
        with self.transaction() as tx:
            lock = "" if self.is_sqlite else " FOR UPDATE"  # SQLite: BEGIN IMMEDIATE already holds the lock
            row = tx.one("SELECT seq, mac FROM audit_head WHERE id = 1" + lock)
            if row is None:
                raise ValueError("database is not initialized")
            yield tx, int(row[0]), bytes(row[1])

    def dispose(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.engine.dispose()


def _first_line(e: BaseException | None) -> str:
    # The driver's first line says what failed (refused, locked, no such file); it carries
    # no request content or key material.
    text = str(e).strip() if e is not None else ""
    return text.splitlines()[0][:200] if text else "database error"


# (table, column, its SQL type and default): what ALTER TABLE adds to a database made before it
ADDED_COLUMNS = (
    ("vault_tokens", "explicit_max_ttl", "INTEGER NOT NULL DEFAULT 0"),
    ("deposits", "approvals_required", "INTEGER NOT NULL DEFAULT 0"),
    ("deposits", "approval_window", "INTEGER NOT NULL DEFAULT 0"),
)


def columns_of(row_type: Any, table: Table) -> str:
    """The SELECT list for a row dataclass: its fields in order, each checked to be a column of
    ``table``, so a row type and its table cannot drift apart unnoticed."""
    names = [f.name for f in dataclasses.fields(row_type)]
    missing = [n for n in names if n not in table.c]
    if missing:
        raise RuntimeError(f"{row_type.__name__} names columns {table.name} lacks: {missing}")
    return ", ".join(names)
