"""Encrypted, consistent backups of a server (database rows and data dir files), and restore.

File layout (docs/OPERATIONS.md, "Backup format"):
  "SRBACKUP1\\n" || u32 header length || header JSON || frames
  header: format, created, seal_params, master_gen, wrapped_master (under U),
          wrapped_backup_key (under M)
  frame:  u32 length || AES-256-GCM(backup key, chunk, AAD = "strongroom backup v1" ||
          SHA-256(header) || u64 index || final flag)
The chunks concatenate to JSON lines: {"t": table, "r": row} and {"f": path, "d": b64, "m": mode}.
A missing final frame (a truncated file) is an error, as is any altered byte.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from strongroom.crypto import aead
from strongroom.crypto.shares import ShareError
from strongroom.server import audit, schema, storage
from strongroom.server import barrier as barrier_mod
from strongroom.server import repository as repo
from strongroom.server.datadir import DataDir, DataDirError, ServerConfig

MAGIC = b"SRBACKUP1\n"
CHUNK = 1 << 20
SKIP_TABLES = {"nodes", "grants", "seen_nonces", "nonces", "registration_failures"}  # runtime state, not data
DATA_FILES = [
    "config.json",
    "tls/ca.pem",
    "tls/ca-key.pem",
    "tls/server.pem",
    "tls/server-key.pem",
    "node.key",
    "admin/profile.json",
    "admin/identity.key",
    "admin/ca.pem",
]


class BackupError(Exception):
    pass


def _frame_aad(header_digest: bytes, index: int, final: bool) -> bytes:
    return b"strongroom backup v1" + header_digest + struct.pack(">QB", index, 1 if final else 0)


def _encode(value: Any) -> Any:
    return {"$b": base64.b64encode(value).decode()} if isinstance(value, bytes | memoryview) else value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"$b"}:
        return base64.b64decode(value["$b"])
    return value


def write_backup(data: DataDir, unlock: barrier_mod.Unlock, out: IO[bytes]) -> dict[str, int]:
    config = data.load_config()
    store = storage.Store(config.db_url)
    counts: dict[str, int] = {}
    try:
        with store.snapshot() as tx:  # one consistent view of every table
            bar = barrier_mod.Barrier()
            bar.open_with(tx, unlock, 0)
            try:
                backup_key, recovery = bar.new_backup_key(tx)
            except ValueError as e:
                raise BackupError(str(e)) from None
            header = {"format": 1, "created": time.time(), **recovery}
            header_bytes = json.dumps(header, sort_keys=True).encode()
            digest = hashlib.sha256(header_bytes).digest()
            out.write(MAGIC + struct.pack(">I", len(header_bytes)) + header_bytes)

            def lines() -> Iterator[bytes]:
                for table in schema.metadata.sorted_tables:
                    if table.name in SKIP_TABLES:
                        continue
                    names, rows = tx.columns(f"SELECT * FROM {table.name}")  # noqa: S608 - names from our schema
                    for row in rows:
                        yield (
                            json.dumps({"t": table.name, "r": {k: _encode(v) for k, v in zip(names, row, strict=True)}}).encode()
                            + b"\n"
                        )
                    counts[table.name] = len(rows)
                for rel in DATA_FILES:
                    p = data.path / rel
                    if p.exists():
                        item = {"f": rel, "d": base64.b64encode(p.read_bytes()).decode(), "m": p.stat().st_mode & 0o777}
                        yield json.dumps(item).encode() + b"\n"

            _write_frames(out, backup_key, digest, lines())
    finally:
        store.dispose()
    return counts


def _write_frames(out: IO[bytes], key: bytes, digest: bytes, lines: Iterator[bytes]) -> None:
    buf = bytearray()
    index = 0
    for line in lines:
        buf += line
        while len(buf) >= CHUNK:
            sealed = aead.seal(key, bytes(buf[:CHUNK]), _frame_aad(digest, index, False))
            out.write(struct.pack(">I", len(sealed)) + sealed)
            del buf[:CHUNK]
            index += 1
    sealed = aead.seal(key, bytes(buf), _frame_aad(digest, index, True))
    out.write(struct.pack(">I", len(sealed)) + sealed)


def _read_exact(f: IO[bytes], n: int) -> bytes:
    b = f.read(n)
    if len(b) != n:
        raise BackupError("backup file is truncated")
    return b


def read_backup(f: IO[bytes], unlock: barrier_mod.Unlock) -> Iterator[dict[str, Any]]:
    if f.read(len(MAGIC)) != MAGIC:
        raise BackupError("not a Strongroom backup file")
    (hlen,) = struct.unpack(">I", _read_exact(f, 4))
    if hlen > 1 << 20:
        raise BackupError("backup header is implausibly large")
    header_bytes = _read_exact(f, hlen)
    try:
        header = json.loads(header_bytes)
        if not isinstance(header, dict):
            raise ValueError("not an object")
        key = barrier_mod.open_backup_key(header, unlock)
    except (barrier_mod.WrongPassphrase, barrier_mod.NeedsMaterial, ShareError) as e:
        raise BackupError(str(e)) from None
    except (ValueError, RecursionError):
        raise BackupError("backup header is corrupt") from None
    digest = hashlib.sha256(header_bytes).digest()
    index = 0
    pending = b""
    while True:
        raw = f.read(4)
        if len(raw) < 4:
            raise BackupError("backup file is truncated (no final frame)")
        (n,) = struct.unpack(">I", raw)
        if n > CHUNK + 64:
            raise BackupError("backup frame is corrupt")
        sealed = _read_exact(f, n)
        final = False
        try:
            chunk = aead.open_(key, sealed, _frame_aad(digest, index, False))
        except aead.DecryptionError:
            try:
                chunk = aead.open_(key, sealed, _frame_aad(digest, index, True))
                final = True
            except aead.DecryptionError:
                raise BackupError(f"backup frame {index} failed authentication") from None
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield json.loads(line)
        index += 1
        if final:
            if pending or f.read(1):
                raise BackupError("backup has data after its final frame")
            return


def restore(data: DataDir, unlock: barrier_mod.Unlock, f: IO[bytes], db_url: str | None = None) -> dict[str, int]:
    """Restore into an empty data dir and an empty database; then chain a 'restore' audit entry."""
    if not data.is_empty():
        raise DataDirError(f"{data.path} is not empty; restore needs an empty data dir")
    url = db_url or data.default_sqlite_url()
    items = read_backup(f, unlock)
    first = next(items, None)  # the header and its key checked before anything is made
    data.path.mkdir(mode=0o700, parents=True, exist_ok=True)
    store = storage.Store(url)
    counts: dict[str, int] = {}
    files: list[dict[str, Any]] = []
    try:
        if store.has_schema():
            raise DataDirError("that database already holds a Strongroom server; restore needs an empty database")
        store.create_schema()
        tables = {t.name: t for t in schema.metadata.sorted_tables}
        with store.transaction() as tx:
            batch: list[tuple[Any, ...]] = []
            current: tuple[str, tuple[str, ...]] | None = None

            def flush() -> None:
                if current is not None and batch:
                    name, cols = current
                    marks = ", ".join("?" * len(cols))
                    tx.many(f"INSERT INTO {name} ({', '.join(cols)}) VALUES ({marks})", batch)  # noqa: S608 - schema names
                batch.clear()

            for item in itertools.chain([first] if first is not None else [], items):
                if "f" in item:
                    files.append(item)
                    continue
                name = item["t"]
                if name not in tables or name in SKIP_TABLES:
                    raise BackupError(f"backup names an unknown table {name!r}")
                cols = tuple(item["r"])
                if not set(cols) <= set(tables[name].columns.keys()):
                    raise BackupError(f"backup row for {name} has unknown columns")
                if current != (name, cols) or len(batch) >= 500:
                    flush()
                    current = (name, cols)
                batch.append(tuple(_decode(item["r"][c]) for c in cols))
                counts[name] = counts.get(name, 0) + 1
            flush()
            if not store.is_sqlite:
                for t in ("orgs", "groups", "deposits"):  # fixed table names, never input
                    sql = f"SELECT setval(pg_get_serial_sequence('{t}', 'id'), COALESCE((SELECT MAX(id) FROM {t}), 0) + 1, false)"  # noqa: S608
                    tx.value(sql)
            bar = barrier_mod.Barrier()
            bar.open_with(tx, unlock, int(repo.get_meta(tx, "seal_epoch") or "1"))
            head = repo.audit_head(tx)
            last = repo.last_audit_seq(tx)
            if head is None or head[0] != last:
                raise BackupError("backup's audit head does not match its log")
            aw = audit.AuditWriter(tx, head[0], head[1], bar.audit_key())
            aw.append("restore", "restore", "", "ok", entries_restored=last, tables=counts)
            aw.flush()
        config = ServerConfig(db_url=url)
        for item in files:
            if item["f"] == "config.json":
                config = ServerConfig(**{**json.loads(base64.b64decode(item["d"])), "db_url": url})
                continue
            p = data.path / item["f"]
            p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, int(item["m"]))
            with os.fdopen(fd, "wb") as out:
                out.write(base64.b64decode(item["d"]))
        data.write_config(config)
        data.head_file.advance(aw.seq, aw.mac, force=True)
    finally:
        store.dispose()
    return counts


def write_backup_file(data: DataDir, unlock: barrier_mod.Unlock, path: Path) -> dict[str, int]:
    tmp = path.with_name(path.name + ".partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            counts = write_backup(data, unlock, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return counts
