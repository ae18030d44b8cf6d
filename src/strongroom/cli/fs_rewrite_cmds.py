"""`strongroom fs rotate|reencrypt|move`: the commands that rewrite a volume's lower directory
or move data into a mounted one (fs_cmds.py has the others, and the `fs` group)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from strongroom.cli.common import CliError, emit, json_option, passphrase_option, profile_option, progress_bar, read_passphrase
from strongroom.cli.fs_cmds import _fs_errors, _trustee_client, _volume_keys, fs

# every key source is sealed again by rotate and upgrade: the recovery passphrase is needed too
_recovery_option = click.option(
    "--recovery-passphrase-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The recovery passphrase, if the volume has one.",
)


@contextlib.contextmanager
def _held(volume: Path) -> Iterator[None]:
    """The volume to this command alone: refused while it is mounted under any name (a bind
    mount, a symlink) or another command rewrites it (fs/inuse.py)."""
    from strongroom.fs import inuse, journal

    try:
        fd = inuse.hold(volume)
    except inuse.VolumeBusy as e:
        raise CliError(str(e)) from None
    for line in journal.replay(os.path.realpath(volume)):  # what a killed daemon left half done
        click.echo(line, err=True)
    try:
        yield
    finally:
        os.close(fd)


@fs.command("rotate")
@click.argument("volume", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--full",
    is_flag=True,
    help="Renew every key, not only the KEK: names, attributes, rules and file contents are written anew.",
)
@click.option("--abort", "abort_", is_flag=True, help="With --full: forget an interrupted full rotation that is still building.")
@_recovery_option
@passphrase_option
@profile_option
@json_option
@_fs_errors
def fs_rotate(
    volume: Path,
    full: bool,
    abort_: bool,
    recovery_passphrase_file: Path | None,
    passphrase_file: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
    as_json: bool,
) -> None:
    """Give an unmounted volume a new key-encryption key: every wrapped key is re-wrapped (no data
    is rewritten) and the old key opens nothing afterwards.  Needs every key source's secret.
    Safe to interrupt: run it again to finish.  With --full every key is renewed -- KEK, name,
    attribute, rules-MAC and directory keys, every file key and id -- and the volume is written
    anew beside itself (it needs room for a second copy while it runs): after it, no old key and
    no old copy of the config opens anything in the volume.

    \b
    Example:
      strongroom fs rotate /srv/vault --recovery-passphrase-file recovery.pw
      strongroom fs rotate --full /srv/vault --passphrase-file vault.pw
    """
    from strongroom.fs import mount, rotate

    if (where := mount.volume_mounted(volume)) is not None:
        raise CliError(f"{volume} is mounted at {where}: unmount it first")
    if abort_:
        _abort_full(volume, full, as_json)
        return
    checked = _every_source_key(volume, passphrase_file, recovery_passphrase_file, profile, servers, "rotation")
    if full:
        _rotate_full(volume, checked, as_json)
        return
    with _held(volume):
        total = sum(1 for _ in rotate.lower_entries(volume))
        with progress_bar("re-wrapping keys", total) as advance:
            result = rotate.rotate(volume, checked, advance)
    out = {"volume": str(volume), "headers": result.headers, "symlinks": result.symlinks, "already_rotated": result.already}
    emit(
        out,
        as_json,
        lambda o: click.echo(f"rotated: {o['headers']} file headers and {o['symlinks']} symlinks re-wrapped under a new key"),
    )


def _abort_full(volume: Path, full: bool, as_json: bool) -> None:
    from strongroom.fs import fullrotate

    if not full:
        raise CliError("--abort goes with --full (a plain rotation is finished by running it again)")
    with _held(volume):
        try:
            forgot = fullrotate.abort(volume)
        except fullrotate.RotationError as e:
            raise CliError(str(e)) from None
    emit(
        {"volume": str(volume), "aborted": forgot},
        as_json,
        lambda o: click.echo("full rotation forgotten; the volume is as it was" if forgot else "no full rotation to forget"),
    )


def _rotate_full(volume: Path, checked: Any, as_json: bool) -> None:
    from strongroom.fs import fullrotate

    with _held(volume):
        try:
            with progress_bar("renewing every key", fullrotate.count(volume)) as advance:
                result = fullrotate.rotate_full(volume, checked, advance)
        except fullrotate.RotationError as e:
            raise CliError(f"{e} (or 'strongroom fs rotate --full --abort' while it is still building)") from None
        except OSError as e:  # a path past PATH_MAX in the new tree, a full disk
            raise CliError(f"the full rotation stopped: {e.strerror} ({e.filename}); run it again to resume") from None
    out = {
        "volume": str(volume),
        "full": True,
        "files": result.files,
        "bytes": result.bytes,
        "directories": result.directories,
        "symlinks": result.symlinks,
        "special": result.special,
    }
    emit(
        out,
        as_json,
        lambda o: click.echo(
            f"every key renewed: {o['files']} files ({o['bytes']} bytes), {o['directories']} directories and "
            f"{o['symlinks']} symlinks written anew under new keys"
        ),
    )


def _every_source_key(
    volume: Path,
    passphrase_file: Path | None,
    recovery_passphrase_file: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
    why: str,
) -> Any:
    """source -> its source key, checked against the volume's config: the commands that seal
    the volume key under every key source again need every source's secret.  Its ``renew(source,
    kek)`` makes a passphrase source anew, with the passphrase given and fresh parameters."""
    from strongroom.fs.config import ConfigError, VolumeConfig, passphrase_source, passphrase_source_key
    from strongroom.fs.volume import fetch_source_key

    cfg = VolumeConfig.load(volume)
    given: dict[str, str] = {}  # role -> the passphrase read for it

    def source_key(source: dict[str, Any]) -> bytes:
        if source["type"] == "trustee":
            return fetch_source_key(source, _trustee_client(profile, servers, source))
        if source.get("role") == "recovery":
            if recovery_passphrase_file is None and not sys.stdin.isatty():
                raise CliError(
                    f"this volume has a recovery passphrase: pass --recovery-passphrase-file ({why} re-seals every key source)"
                )
            pw = read_passphrase(recovery_passphrase_file, what="Recovery passphrase")
        else:
            pw = read_passphrase(passphrase_file, what="Volume passphrase")
        given[source.get("role", "primary")] = pw
        return passphrase_source_key(source, pw, cfg.version)

    def renew(source: dict[str, Any], kek: bytes) -> dict[str, Any]:
        role = source.get("role", "primary")
        return passphrase_source(kek, cfg.volume_id, given[role], role)

    def checked(source: dict[str, Any]) -> bytes:
        key = source_key(source)
        try:
            cfg.unlock_with_source_key(source, key)
        except Exception:  # noqa: BLE001 - wrong secret for this source
            raise ConfigError(
                f"the {source['type']} ({source.get('role', 'primary')}) key source does not open with what was given"
            ) from None
        return key

    checked.renew = renew  # type: ignore[attr-defined]
    return checked


@fs.command("upgrade")
@click.argument("volume", type=click.Path(file_okay=False, path_type=Path))
@_recovery_option
@passphrase_option
@profile_option
@json_option
@_fs_errors
def fs_upgrade(
    volume: Path,
    recovery_passphrase_file: Path | None,
    passphrase_file: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
    as_json: bool,
) -> None:
    """Move an unmounted volume of format version 1-4 to version 5 in place: directory tweaks
    bound to their place, object kinds in every header, salted seals, key sources under the
    config's MAC.  Keys and contents stay; no mount starts until it is done.  Safe to
    interrupt: run it again to finish.  Needs every key source's secret, as fs rotate does.

    \b
    Example:
      strongroom fs upgrade /srv/vault --passphrase-file vault.pw
    """
    from strongroom.fs import mount, rotate, upgrade

    if (where := mount.volume_mounted(volume)) is not None:
        raise CliError(f"{volume} is mounted at {where}: unmount it first")
    checked = _every_source_key(volume, passphrase_file, recovery_passphrase_file, profile, servers, "the upgrade")
    with _held(volume):
        total = sum(1 for _ in rotate.lower_entries(volume))
        try:
            with progress_bar("upgrading to format version 5", total) as advance:
                result = upgrade.upgrade(volume, checked, advance, checked.renew)
        except upgrade.UpgradeError as e:
            raise CliError(str(e)) from None
        except OSError as e:  # a full disk, a lower file system gone read-only
            raise CliError(f"the upgrade stopped: {e.strerror} ({e.filename}); run it again to resume") from None
    out = {
        "volume": str(volume),
        "version": 5,
        "already": result.already,
        "directories": result.directories,
        "headers": result.headers,
        "symlinks": result.symlinks,
        "attributes": result.attributes,
    }
    emit(
        out,
        as_json,
        lambda o: click.echo(
            f"{o['volume']} is already format version 5"
            if o["already"]
            else f"upgraded to format version 5: {o['directories']} directories, {o['headers']} file headers, "
            f"{o['symlinks']} symlinks and {o['attributes']} attribute values rewritten"
        ),
    )


@fs.command("reencrypt")
@click.argument("volume", type=click.Path(file_okay=False, path_type=Path))
@click.option("--abort", "abort_", is_flag=True, help="Forget an interrupted pass (its journal and copy) instead of resuming it.")
@passphrase_option
@profile_option
@json_option
@_fs_errors
def fs_reencrypt(
    volume: Path, abort_: bool, passphrase_file: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool
) -> None:
    """Give every file of an unmounted volume a new file key and rewrite its data: the answer to
    a leaked key (rotate alone re-wraps keys, it cannot take back a file key).  Holes stay holes;
    FIFOs, sockets and devices are left as they are.  Resumable: an interrupted or failed run
    continues where it stopped (--abort forgets it instead; every file is whole either way).

    \b
    Example:
      strongroom fs reencrypt /srv/vault --passphrase-file pw
    """
    from strongroom.fs import mount, reencrypt, rotate

    if (where := mount.volume_mounted(volume)) is not None:
        raise CliError(f"{volume} is mounted at {where}: unmount it first")
    if abort_:
        with _held(volume):
            removed = reencrypt.abort(volume)
        out = {"volume": str(volume), "removed": removed}
        emit(out, as_json, lambda o: click.echo(f"forgot the interrupted pass ({o['removed']} files it left removed)"))
        return
    keys = _volume_keys(volume, passphrase_file, profile, servers)
    with _held(volume):
        total = sum(1 for _ in rotate.lower_entries(volume))
        try:
            with progress_bar("re-encrypting", total) as advance:
                result = reencrypt.reencrypt(volume, keys, advance)
        except reencrypt.ReencryptError as e:
            raise CliError(str(e)) from None
    out = {
        "volume": str(volume),
        "files": result.files,
        "symlinks": result.symlinks,
        "special_files_kept": result.special,
        "resumed_past": result.skipped,
        "bytes": result.bytes,
    }
    emit(
        out,
        as_json,
        lambda o: click.echo(
            f"re-encrypted {o['files']} files ({o['bytes']} bytes) and {o['symlinks']} symlinks under new file keys"
        ),
    )


@fs.command("move")
@click.argument("path", type=click.Path(path_type=Path))
@click.argument("target", metavar="MOUNTPOINT[/SUB]", type=click.Path(path_type=Path))
@json_option
def fs_move(path: Path, target: Path, as_json: bool) -> None:
    """Move an existing directory into a mounted volume: copy (with progress), verify, remove the
    plaintext original and leave a symlink at the old path so programs keep working.  Run it
    again after an interruption: it finishes without losing or duplicating data.

    \b
    Example:
      strongroom fs move /var/lib/mysql /srv/vault-mnt/mysql
    """
    from strongroom.fs import mount
    from strongroom.fs.move import MoveError, move, move_size

    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    mp = Path(probe).resolve()
    while mount.mounted_at(mp) is None and mp != mp.parent:
        mp = mp.parent
    source = mount.mounted_at(mp)
    if source is None or not source.startswith("strongroom:"):
        raise CliError(f"{target} is not inside a mounted Strongroom volume")
    dest = target if target.resolve() != mp else mp / path.name
    total = move_size(path) if path.is_dir() and not path.is_symlink() else 0
    try:
        with progress_bar("moving", total) as advance:
            result = move(path, dest, advance)
    except MoveError as e:
        raise CliError(str(e)) from None
    out = {"moved": str(path), "to": str(dest), "files": result.files, "bytes": result.bytes, "already_there": result.skipped}

    def human(o: dict[str, Any]) -> None:
        if result.already:
            click.echo(f"{o['moved']} was already moved to {o['to']}")
            return
        click.echo(f"moved {o['moved']} -> {o['to']} ({o['files']} files copied, {o['already_there']} already there)")
        click.echo(f"a symlink stays at {o['moved']}")

    emit(out, as_json, human)
