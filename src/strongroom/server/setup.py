"""`server init`: data dir, database, TLS, key hierarchy, admin credential and first organization."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from strongroom.client.profile import Profile
from strongroom.crypto.identity import Identity
from strongroom.server import audit, barrier, schema, storage, tls
from strongroom.server import repository as repo
from strongroom.server.datadir import DataDir, DataDirError, ServerConfig
from strongroom.server.hsm import ServerHsm
from strongroom.server.identities import SHORT_NAME_RE, check_name, new_client_id, new_secret, secret_hash
from strongroom.server.transitseal import TransitSeal


@dataclass
class InitResult:
    org: str
    auth_secret: str
    admin_profile: Path
    admin_id: str
    db_url: str
    shares: list[str]  # the unseal shares to hand out (printed once), none for a passphrase
    seal: str  # how the server is unsealed, for people


def _empty(path: Path, remove_dir: bool) -> None:
    if remove_dir:
        shutil.rmtree(path, ignore_errors=True)
        return
    for p in path.iterdir():
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def check_entropy_mix(spec: str | None) -> str | None:
    """A hardware source that works on this host, or None ("none"): the server's mixing option."""
    from strongroom.rng.sources import SourceUnavailable, open_source

    if spec in (None, "none"):
        return None
    assert spec is not None
    if spec.partition(":")[0] not in ("rdrand", "rdseed", "hwrng"):
        raise ValueError(f"entropy mix source must be rdrand, rdseed, hwrng[:PATH] or none, not {spec!r}")
    try:
        open_source(spec).close()
    except SourceUnavailable as e:
        raise ValueError(str(e)) from None
    return spec


def init_server(
    data: DataDir,
    unlock: barrier.Unlock | str,
    db_url: str | None = None,
    names: list[str] | None = None,
    org: str = "default",
    server_url: str | None = None,
    deposit_limit: int | None = None,
    entropy_mix: str | None = None,
    key_shares: int = 0,
    key_threshold: int = 0,
    holder: ServerHsm | TransitSeal | None = None,
) -> InitResult:
    """``unlock``: a passphrase, or none with ``key_shares`` of ``key_threshold`` (shares), or
    none with ``holder``, an HSM or another server's transit key (its link in ``unlock.hsm``;
    ``key_shares`` then counts recovery shares).
    A string is a passphrase."""
    if isinstance(unlock, str):
        unlock = barrier.Unlock(passphrase=unlock)
    check_name(org, "organization name", SHORT_NAME_RE)
    names = names or ["localhost", "127.0.0.1"]
    url = db_url or data.default_sqlite_url()
    config = ServerConfig(db_url=url, names=names)
    if deposit_limit is not None:
        config.deposit_limit = deposit_limit
    config.entropy_mix = check_entropy_mix(entropy_mix)
    config.hsm = holder.to_json() if isinstance(holder, ServerHsm) else None
    config.transit_seal = holder.to_json() if isinstance(holder, TransitSeal) else None
    if not data.is_empty():
        raise DataDirError(f"{data.path} is not empty; pick a new data dir")
    created_dir = not data.path.exists()
    data.create(config)
    store = storage.Store(url)
    try:
        if store.has_schema():
            raise DataDirError("that database already holds a Strongroom server; use an empty database")
        tls.create(data.tls, names)
        store.create_schema()
        admin = Identity.generate()
        admin_id = new_client_id()
        secret = new_secret()
        with store.transaction() as tx:
            bar = barrier.Barrier()
            label = holder.key_label if isinstance(holder, ServerHsm) else holder.key if holder else ""
            repo.set_meta(tx, "schema_version", str(schema.SCHEMA_VERSION))
            made = bar.initialize(tx, unlock, key_shares, key_threshold, label)
            seal = barrier.seal_config(tx).describe()
            aw = audit.AuditWriter(tx, 0, audit.GENESIS, bar.audit_key())
            now = time.time()
            repo.insert_client(tx, admin_id, None, "admin", admin.public_bytes(), "admin", now)
            repo.insert_org(tx, org, secret_hash(secret), now)
            aw.append("init", "init", "", "ok", db="postgresql" if not store.is_sqlite else "sqlite")
            aw.append("init", "org.create", org, "ok")
            aw.flush()
        data.head_file.advance(aw.seq, aw.mac)
    except BaseException:
        # Leave nothing half-made behind: a rerun must start from an empty dir.
        _empty(data.path, remove_dir=created_dir)
        raise
    finally:
        store.dispose()
    host = names[0]
    url_host = f"[{host}]" if ":" in host else host
    Profile(data.admin_profile, [server_url or f"https://{url_host}:8443"], admin_id, admin, "admin", None, "admin").save(
        data.ca_file.read_bytes()
    )
    return InitResult(org, secret, data.admin_profile, admin_id, url, made, seal)
