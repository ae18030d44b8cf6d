"""Creating and unlocking a volume: the config plus the root directory's tweak, and the key
sources that open it (a passphrase, or a deposit on the key server reached through the client)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strongroom.fs import config, durable, keys, names

UPGRADE_STAGED = "strongroom.upgrade.json"  # fs/upgrade.py's staged config: no mount while it exists
FULL_ROTATION = "strongroom.rotate-full.json"  # fs/fullrotate.py's state: likewise


def write_diriv(directory: str | os.PathLike[str], iv: bytes | None = None) -> bytes:
    """Store a directory's tweak (``iv``, or a new random one), durable before anything is created
    in the directory or the directory is moved: written with O_DSYNC, then the directory fsync'd
    so its entry is durable too."""
    iv = names.new_diriv() if iv is None else iv
    path = os.path.join(directory, names.DIRIV)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DSYNC, 0o400)
    try:
        if os.write(fd, iv) != len(iv):
            raise OSError(28, "short write of the directory tweak")
    except OSError:
        os.close(fd)
        os.unlink(path)  # never leave a short tweak behind (ENOSPC)
        raise
    os.close(fd)
    durable.fsync_dir(directory)
    return iv


REENCRYPT_JOURNAL = "strongroom.reencrypt.journal"  # fs/reencrypt.py's


def interrupted(directory: Path, cfg: config.VolumeConfig, besides: str = "", mounts_only: bool = False) -> str | None:
    """What an interrupted offline operation left unfinished on the volume, as the sentence that
    says what to run, or None.  ``besides``: the command asking, which finishes its own
    (``rotate``, ``rotate --full``, ``upgrade``); ``mounts_only``: only what blocks a mount (a
    reencrypt pass and the shrinks the daemon finishes itself do not)."""
    from strongroom.fs import journal

    checks = [
        ("rotate", "rotation" in cfg.extra, "a key rotation was interrupted"),
        ("rotate --full", os.path.lexists(directory / FULL_ROTATION), "a full key rotation was interrupted"),
        ("upgrade", os.path.lexists(directory / UPGRADE_STAGED), "an upgrade to format version 5 was interrupted"),
    ]
    if not mounts_only:
        checks.append(("reencrypt", os.path.lexists(directory / REENCRYPT_JOURNAL), "a reencrypt pass was interrupted"))
    for command, found, what in checks:
        if found and command != besides:
            return f"{what}: run 'strongroom fs {command}' again to finish it"
    if not mounts_only and journal.pending(str(directory)):
        return "the volume has unfinished shrinks: mount it once (they finish at mount), then run this again"
    return None


@dataclass(frozen=True)
class TangBinding:
    """Tang servers to bind a new volume to: ``threshold`` of ``urls``; their signing keys
    among ``thumbprints``, or trusted as advertised when ``trust``."""

    urls: list[str]
    threshold: int = 1
    thumbprints: list[str] | None = None
    trust: bool = False


def init_volume(
    directory: Path,
    passphrase: str | None = None,
    recovery_passphrase: str | None = None,
    client: Any = None,
    deposit: str | None = None,
    tang: TangBinding | None = None,
) -> config.VolumeConfig:
    """Create a volume in an empty (or new) directory, keyed by a passphrase, the key server
    (``client``, a strongroom.client.Client: the KEK's source key becomes its deposit) and/or
    Tang servers (``tang``)."""
    if passphrase is None and client is None and tang is None:
        raise ValueError("a volume needs a key source: a passphrase, the key server or Tang servers")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if any(directory.iterdir()):
        raise config.ConfigError(f"{directory} is not empty")
    volume_id = os.urandom(16)
    vk = keys.VolumeKeys.fresh(volume_id, config.VERSION)
    sources = []
    if client is not None:
        source_key = os.urandom(32)
        name = deposit or f"volume-{names.b64u(volume_id)}"
        client.put(name, source_key)
        sources.append(
            config.trustee_source(vk.kek, volume_id, list(client.servers), client.client_id, name, source_key, vk.version)
        )
    if tang is not None:
        from strongroom.fs import tang as tang_mod

        try:
            source_key, servers = tang_mod.bind(tang.urls, tang.threshold, volume_id, tang.thumbprints, tang.trust)
        except tang_mod.TangFailure as e:
            raise config.ConfigError(f"Tang: {e}") from None
        role = "primary" if client is None else "recovery"
        sources.append(config.tang_source(vk.kek, volume_id, tang.threshold, servers, source_key, role, vk.version))
    if passphrase is not None:
        primary = client is None and tang is None
        sources.append(config.passphrase_source(vk.kek, volume_id, passphrase, "primary" if primary else "recovery", vk.version))
    if recovery_passphrase is not None:
        sources.append(config.passphrase_source(vk.kek, volume_id, recovery_passphrase, "recovery", vk.version))
    cfg = config.VolumeConfig.new(vk, sources)
    write_diriv(directory, names.Tweaks(vk.version, vk.dir_ids, volume_id).record(names.new_diriv(), None, ""))
    cfg.save(directory)
    return cfg


def unlock(
    directory: Path,
    passphrase: Callable[[], str] | None = None,
    client_factory: Callable[[dict[str, Any]], Any] | None = None,
    prefer_passphrase: bool = False,
) -> keys.VolumeKeys:
    """The volume's keys: from the key server when the volume has such a source and a client
    factory is given (unless ``prefer_passphrase``: a recovery passphrase was supplied), else
    from a passphrase (asked for only when needed)."""
    cfg = config.VolumeConfig.load(directory)
    if (pending := interrupted(directory, cfg, mounts_only=True)) is not None:
        raise config.ConfigError(pending)
    factory = client_factory
    if cfg.sources("tang") and not (prefer_passphrase and cfg.sources("passphrase")):
        try:
            return cfg.unlock_tang()
        except config.ConfigError:
            if not (cfg.sources("trustee") and factory is not None) and not (passphrase and cfg.sources("passphrase")):
                raise  # nothing else to try: say why the Tang servers did not unlock it
    if cfg.sources("trustee") and factory is not None and not (prefer_passphrase and cfg.sources("passphrase")):
        return cfg.unlock_trustee(lambda source: fetch_source_key(source, factory(source)))
    if passphrase is None:
        raise config.ConfigError("this volume needs a passphrase")
    return cfg.unlock_passphrase(passphrase())


def fetch_source_key(source: dict[str, Any], client: Any) -> bytes:
    """A trustee key source's key: its deposit, fetched with ``client`` (closed after)."""
    try:
        owner = None if source["owner"] == client.client_id else source["owner"]  # a shared deposit
        data: bytes = client.get(source["deposit"], owner=owner)
        return data
    finally:
        client.close()


def standalone_keks(directory: Path, vk: keys.VolumeKeys) -> list[bytes]:
    """The KEKs a standalone file made with this volume's key may be under: the current one,
    then the ones retired by rotations, newest first (FORMAT.md §7)."""
    return [bytes(vk.kek), *config.VolumeConfig.load(directory).retired_keks(vk.kek)]
