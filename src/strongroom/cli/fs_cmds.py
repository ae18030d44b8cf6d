"""`strongroom fs ...`: encrypted volumes (init, mount, umount, move, fsck, cat, rotate,
reencrypt) and standalone encrypted files (encrypt, decrypt).  The work is in strongroom.fs."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import click

from strongroom.cli.common import (
    CliError,
    Group,
    emit,
    json_option,
    open_client,
    passphrase_option,
    profile_option,
    read_passphrase,
)
from strongroom.cli.tang_cmds import tang_binding, tang_options


@click.group("fs", cls=Group)
def fs() -> None:
    """Encrypted volumes and files (format: docs/FORMAT.md)."""


def _fs_errors(fn: Any) -> Any:
    """Format errors become one readable line."""
    import functools

    from strongroom.fs.config import ConfigError
    from strongroom.fs.content import DamagedFile
    from strongroom.fs.standalone import NotStandalone

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ConfigError, NotStandalone) as e:
            raise CliError(str(e), code=2) from None
        except DamagedFile as e:
            raise CliError(f"damaged: {e}") from None

    return wrapper


@fs.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--key-server", is_flag=True, help="Keep the volume key on the Strongroom server (a deposit of this host).")
@click.option("--deposit", help="Deposit name for the volume key (default volume-<id>).")
@click.option("--passphrase", "use_passphrase", is_flag=True, help="Key the volume with a passphrase (Argon2id).")
@click.option(
    "--recovery-passphrase", is_flag=True, help="Also add a recovery passphrase (from --recovery-passphrase-file or a prompt)."
)
@click.option(
    "--recovery-passphrase-file", type=click.Path(dir_okay=False, path_type=Path), help="Read the recovery passphrase here."
)
@tang_options
@passphrase_option
@profile_option
@json_option
@_fs_errors
def fs_init(
    directory: Path,
    key_server: bool,
    deposit: str | None,
    use_passphrase: bool,
    recovery_passphrase: bool,
    recovery_passphrase_file: Path | None,
    passphrase_file: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
    as_json: bool,
    **tang_kw: Any,
) -> None:
    """Create an encrypted volume in an empty directory.

    \b
    Example:
      strongroom fs init /srv/vault --key-server --recovery-passphrase
      strongroom fs init /srv/vault --passphrase --passphrase-file pw
      strongroom fs init /srv/vault --tang https://tang1 --tang https://tang2 --tang-threshold 2 --tang-trust
    """
    from strongroom.fs.names import b64u
    from strongroom.fs.volume import init_volume

    tang = tang_binding(tang_kw)
    if key_server + use_passphrase + (tang is not None) == 0 or (key_server and use_passphrase):
        raise CliError("choose --key-server, --passphrase or --tang URL (--tang may join either)")
    pw = read_passphrase(passphrase_file, confirm=True, what="Volume passphrase") if use_passphrase else None
    recovery = None
    if recovery_passphrase or recovery_passphrase_file:
        recovery = read_passphrase(recovery_passphrase_file, confirm=True, what="Recovery passphrase")
    client = open_client(profile, servers) if key_server else None
    try:
        cfg = init_volume(directory, pw, recovery, client, deposit, tang)
    finally:
        if client is not None:
            client.close()
    out = {
        "volume": str(directory),
        "volume_id": b64u(cfg.volume_id),
        "key_sources": [f"{s['type']} ({s['role']})" for s in cfg.key_sources],
    }
    emit(
        out,
        as_json,
        lambda o: click.echo(f"created volume {o['volume']} ({o['volume_id']}), keyed by {', '.join(o['key_sources'])}"),
    )


def _special(path: str) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


def _open_in(path: str) -> IO[bytes]:
    return sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115


class _Output:
    """Writes to OUT.partial and renames on success, so a failed run leaves no plausible plaintext.
    An existing OUT that is not a regular file (/dev/null, a FIFO, a tape) is written in place:
    renaming a file over it would replace the device."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tmp = None if path == "-" or _special(path) else path + ".partial"
        if path == "-":
            self.f: IO[bytes] = sys.stdout.buffer
        else:
            self.f = open(self.tmp or path, "wb")  # noqa: SIM115

    def _close(self) -> None:
        if self.f is not sys.stdout.buffer:
            self.f.close()

    def commit(self) -> None:
        self.f.flush()
        if self.tmp is None:
            self._close()
            return
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self._close()
        if self.tmp is not None:
            Path(self.tmp).unlink(missing_ok=True)

    def __enter__(self) -> IO[bytes]:
        return self.f

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def _trustee_client(profile: Path | None, servers: tuple[str, ...], source: dict[str, Any]) -> Any:
    """A client for a trustee key source: the servers given with --server, else the ones the
    volume recorded for its deposit (failover across them), else the profile's."""
    recorded = tuple(str(s) for s in source.get("servers") or () if isinstance(s, str))
    return open_client(profile, servers or recorded)


def _volume_keys(volume: Path, passphrase_file: Path | None, profile: Path | None, servers: tuple[str, ...]) -> Any:
    from strongroom.fs.volume import unlock

    def client_factory(source: dict[str, Any]) -> Any:
        return _trustee_client(profile, servers, source)

    supplied = passphrase_file is not None or bool(os.environ.get("STRONGROOM_PASSPHRASE"))
    return unlock(
        volume, lambda: read_passphrase(passphrase_file, what="Volume passphrase"), client_factory, prefer_passphrase=supplied
    )


_threads_option = click.option(
    "--threads",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Threads sealing or opening blocks (0: one per CPU this process may use).",
)


@fs.command("encrypt")
@click.argument("source", metavar="FILE|-")
@click.option("-o", "--out", required=True, metavar="OUT|-", help="Where to write the encrypted file.")
@click.option(
    "--volume", type=click.Path(file_okay=False, exists=True, path_type=Path), help="Key it with this volume (else a passphrase)."
)
@_threads_option
@passphrase_option
@profile_option
@_fs_errors
def fs_encrypt(
    source: str,
    out: str,
    volume: Path | None,
    threads: int,
    passphrase_file: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
) -> None:
    """Encrypt a file or stdin, streaming, with a volume's key or a passphrase (docs/FORMAT.md §7).

    \b
    Example:
      tar c /etc | strongroom fs encrypt - -o etc.tar.sr --volume /srv/vault
      strongroom fs encrypt db.dump -o db.dump.sr --passphrase-file pw
    """
    from strongroom.fs import standalone

    vk = _volume_keys(volume, passphrase_file, profile, servers) if volume is not None else None
    pw = None if vk is not None else read_passphrase(passphrase_file, confirm=True, what="File passphrase")
    with _open_in(source) as src, _Output(out) as dst:
        if vk is not None:
            standalone.encrypt_stream(src, dst, vk.volume_id, vk.kek, None, threads)
        else:
            assert pw is not None
            standalone.encrypt_with_passphrase(src, dst, pw, threads)


@fs.command("decrypt")
@click.argument("source", metavar="FILE|-")
@click.option("-o", "--out", required=True, metavar="OUT|-", help="Where to write the plaintext (- for stdout).")
@click.option("--volume", type=click.Path(file_okay=False, exists=True, path_type=Path), help="The volume that keyed the file.")
@_threads_option
@passphrase_option
@profile_option
@_fs_errors
def fs_decrypt(
    source: str,
    out: str,
    volume: Path | None,
    threads: int,
    passphrase_file: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
) -> None:
    """Decrypt a file made by `fs encrypt`; a damaged or cut file fails (exit 1) and, with -o FILE,
    leaves nothing behind.

    \b
    Example:
      strongroom fs decrypt etc.tar.sr -o - --volume /srv/vault | tar x
      strongroom fs decrypt db.dump.sr -o db.dump --passphrase-file pw
    """
    from strongroom.fs import standalone
    from strongroom.fs.volume import standalone_keks

    def kek_for(env: standalone.Envelope) -> list[bytes]:
        if env.key_source is None:
            if volume is None:
                raise CliError("this file is keyed by a volume: pass --volume DIR")
            vk = _volume_keys(volume, passphrase_file, profile, servers)
            if vk.volume_id != env.volume_id:
                raise CliError(f"this file was not encrypted with the volume at {volume}")
            return standalone_keks(volume, vk)
        return [standalone.kek_from_passphrase(env, read_passphrase(passphrase_file, what="File passphrase"))]

    with _open_in(source) as src, _Output(out) as dst:
        standalone.decrypt_stream(src, dst, kek_for, threads)


@fs.command("mount")
@click.argument("volume", type=click.Path(file_okay=False, path_type=Path))
@click.argument("mountpoint", type=click.Path(file_okay=False, path_type=Path))
@click.option("--foreground", is_flag=True, help="Serve in the foreground (logs on stderr) until unmounted or SIGTERM/SIGINT.")
@click.option("--allow-other", is_flag=True, help="Let other users reach the mount (subject to file modes).")
@click.option("--read-only", is_flag=True, help="Mount read-only.")
@click.option(
    "--dev",
    is_flag=True,
    help="Let device nodes on the volume be opened as devices (nodev otherwise, the default: who can "
    "write the lower directory could plant one).",
)
@click.option(
    "--attr-timeout",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0, 60),
    help="Seconds the kernel may cache attributes; 0 makes sizes exact across hard-link names at once (slower).",
)
@click.option(
    "--acl-timeout",
    default=0.1,  # mount.ACL_TIMEOUT (not imported here: the CLI starts without the FUSE layer; a test holds them equal)
    show_default=True,
    type=click.FloatRange(0, 1),
    help="With access rules: seconds the kernel may answer a lookup or stat of a name unchecked "
    "(opens and listings are always checked); 0 checks every one (slower).",
)
@click.option(
    "--keep-warm/--no-keep-warm",
    default=True,
    show_default=True,
    help="While requests flow (and 20 ms after), keep a CPU awake with a lowest-priority helper "
    "process, so requests do not wait for a sleeping CPU to wake (a large gain on virtual "
    "machines, for one CPU's time while busy).",
)
@click.option(
    "--setid-shim/--no-setid-shim",
    default=True,
    show_default=True,
    help="Clear set-user-ID and set-group-ID bits in the daemon, sparing the kernel's own checks "
    "(a request before every write and chown); off, the kernel clears them (same result, slower).",
)
@click.option(
    "--reader-baton/--no-reader-baton",
    default=True,
    show_default=True,
    help="Let one libfuse thread read requests at a time, so a stream of small requests stays on one "
    "thread; off, every idle thread reads (slower on metadata-heavy work).",
)
@passphrase_option
@profile_option
@_fs_errors
def fs_mount(
    volume: Path,
    mountpoint: Path,
    foreground: bool,
    allow_other: bool,
    read_only: bool,
    dev: bool,
    attr_timeout: float,
    acl_timeout: float,
    keep_warm: bool,
    setid_shim: bool,
    reader_baton: bool,
    passphrase_file: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
) -> None:
    """Mount a volume: programs read and write plaintext under MOUNTPOINT, only ciphertext reaches
    VOLUME.  The key comes from the key server (volumes made with --key-server) or a passphrase.
    Returns once the mount is up, unless --foreground.

    \b
    Example:
      strongroom fs mount /srv/vault /var/lib/postgresql
      strongroom fs mount /srv/vault /mnt/vault --foreground --passphrase-file pw
    """
    from strongroom.fs import mount
    from strongroom.fs.config import VolumeConfig

    cfg = VolumeConfig.load(volume)
    if (where := mount.volume_mounted(volume)) is not None:
        raise CliError(f"{volume} is already mounted at {where}")
    if not mountpoint.is_dir():
        raise CliError(f"{mountpoint} is not a directory")
    keys = _volume_keys(volume, passphrase_file, profile, servers)  # fails here, in the caller's terminal, if refused
    trustee = cfg.sources("trustee")
    report_to = (lambda: _trustee_client(profile, servers, trustee[0])) if trustee else None

    def serve(ready: Callable[[], None] | None) -> None:
        mount.run(
            volume,
            mountpoint,
            keys,
            cfg.long_name_max,
            allow_other,
            read_only,
            on_mounted=ready,
            attr_timeout=attr_timeout,
            report_to=report_to,
            acl_timeout=acl_timeout,
            derived_tweaks=cfg.derived_tweaks,
            holes=cfg.holes,
            bound_xattrs=cfg.bound_xattrs,
            keep_warm=keep_warm,
            dev=dev,
            setid_shim=setid_shim,
            reader_baton=reader_baton,
        )

    if foreground:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        from strongroom import sdnotify

        def mounted() -> None:
            sdnotify.ready(f"{volume} mounted at {mountpoint}")  # systemd's Type=notify

        try:
            serve(mounted)
        except mount.MountError as e:
            raise CliError(str(e)) from None
        return
    from strongroom.daemon import DetachError, log_handler, run_detached

    try:
        run_detached(serve, lambda: log_handler(None))
    except DetachError as e:
        raise CliError(str(e)) from None


@fs.command("umount")
@click.argument("mountpoint", type=click.Path(file_okay=False, path_type=Path))
@_fs_errors
def fs_umount(mountpoint: Path) -> None:
    """Unmount a volume (the daemon then exits).

    \b
    Example:
      strongroom fs umount /mnt/vault
    """
    from strongroom.fs import mount

    try:
        mount.umount(mountpoint)
    except mount.MountError as e:
        raise CliError(str(e)) from None


@fs.command("fsck")
@click.argument("volume", type=click.Path(file_okay=False, path_type=Path))
@passphrase_option
@profile_option
@json_option
def fs_fsck(volume: Path, passphrase_file: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Check every config, header, block, name, symlink and attribute of an unmounted volume with
    its key.  Exit 0 when clean, 1 when damage was found, 2 when it could not check.

    \b
    Example:
      strongroom fs fsck /srv/vault --passphrase-file pw
    """
    from strongroom.fs.config import ConfigError, VolumeConfig
    from strongroom.fs.fsck import Checker

    try:
        cfg = VolumeConfig.load(volume)
        keys = _volume_keys(volume, passphrase_file, profile, servers)
    except ConfigError as e:
        raise CliError(f"cannot check: {e}", code=2) from None
    except CliError as e:
        raise CliError(f"cannot check: {e}", code=2) from None
    except Exception as e:  # noqa: BLE001 - a key server or profile failure: could not check
        raise CliError(f"cannot check: {type(e).__name__}: {e}", code=2) from None
    try:
        report = Checker(volume, keys, cfg.long_name_max, cfg.derived_tweaks, cfg.holes, cfg.bound_xattrs).run()
    except (OSError, RecursionError, MemoryError) as e:  # the walk itself failed: nothing can be said
        raise CliError(f"cannot check: {getattr(e, 'strerror', None) or type(e).__name__}", code=2) from None
    out = {
        "volume": str(volume),
        "directories": report.directories,
        "files": report.files,
        "blocks": report.blocks,
        "symlinks": report.symlinks,
        "problems": [p.__dict__ for p in report.problems],
        "clean": not report.damaged,
    }

    def human(o: dict[str, Any]) -> None:
        for p in report.problems:
            kind = "damaged" if p.damage else "note"
            click.echo(f"{kind}: {p.plain or '(name unreadable)'} [{p.lower}]: {p.what}")
        state = "clean" if not report.damaged else f"{sum(p.damage for p in report.problems)} problem(s)"
        click.echo(f"{o['directories']} directories, {o['files']} files, {o['blocks']} blocks, {o['symlinks']} symlinks: {state}")

    emit(out, as_json, human)
    if report.damaged:
        sys.exit(1)


@fs.command("cat")
@click.argument("target", metavar="DIR/PATH")
@passphrase_option
@profile_option
@_fs_errors
def fs_cat(target: str, passphrase_file: Path | None, profile: Path | None, servers: tuple[str, ...]) -> None:
    """Write one file of an unmounted volume to stdout, decrypted (for backup and restore
    scripts): DIR is the volume, PATH the file's plaintext path inside it.

    \b
    Example:
      strongroom fs cat /srv/vault/reports/q3.txt --passphrase-file pw > q3.txt
    """
    from strongroom.fs.config import CONFIG, ConfigError, VolumeConfig
    from strongroom.fs.reader import Unreadable, VolumeReader

    parts = Path(target).absolute().parts
    for cut in range(len(parts), 0, -1):
        root = Path(*parts[:cut])
        if (root / CONFIG).is_file():
            break
    else:
        raise CliError(f"no volume found in {target} (a path inside a volume directory is expected)", code=2)
    inner = "/" + "/".join(parts[cut:])
    if inner == "/":
        raise CliError("give a file inside the volume: DIR/PATH")
    try:
        cfg = VolumeConfig.load(root)
    except ConfigError as e:
        raise CliError(str(e), code=2) from None
    keys = _volume_keys(root, passphrase_file, profile, servers)
    import logging

    logging.getLogger("strongroom.fs").addHandler(logging.NullHandler())  # the error line says it
    logging.getLogger("strongroom.fs").propagate = False
    out = sys.stdout.buffer
    with VolumeReader(root, keys, cfg) as volume:
        try:
            f = volume.open(inner)
        except OSError as e:
            raise CliError(f"{inner}: {e.strerror}") from None
        try:
            with f:
                f.copy_to(out)
        except Unreadable as e:
            raise CliError(f"{inner}: {e.strerror} at byte {e.offset} (run fs fsck)") from None
        finally:
            out.flush()


@fs.command("status")
@click.argument("target", metavar="MOUNTPOINT|VOLUME", type=click.Path(path_type=Path))
@json_option
@_fs_errors
def fs_status(target: Path, as_json: bool) -> None:
    """What a mounted volume's daemon met that it did not expect since it started: damaged blocks
    and names, unreadable or missing directory tweaks, refused access rules, callers it could not
    identify, failures no operation expected; each with a count, the first and the latest place.
    Exit 0 when there is nothing, 1 when there is, 2 when the volume is not mounted.

    \b
    Example:
      strongroom fs status /var/lib/postgresql
    """
    import json

    from strongroom.fs import health, mount, sidecar
    from strongroom.fs.config import VolumeConfig

    source = mount.mounted_at(target)
    if source is not None and source.startswith("strongroom:"):
        volume = Path(source[len("strongroom:") :])
    elif mount.volume_mounted(target) is not None:
        volume = target
    else:
        raise CliError(f"{target} is not a mounted Strongroom volume (nor its mount point)", code=2)
    path = health.status_path(VolumeConfig.load(volume).volume_id)
    try:
        raw = sidecar.read_bounded(path, 1 << 20)
        state = json.loads(raw) if raw is not None else None
    except (OSError, ValueError) as e:
        raise CliError(f"{path}: unreadable ({e})", code=2) from None
    if state is None:
        raise CliError(f"{path}: the daemon keeps no status here (mounted by a user who cannot write /run?)", code=2)
    problems = state.get("problems", {})

    def human(o: dict[str, Any]) -> None:
        click.echo(f"{o['volume']} mounted at {o['mountpoint']} (daemon pid {o['pid']})")
        if not o["problems"]:
            click.echo("nothing unexpected since it started")
        for kind, seen in sorted(o["problems"].items()):
            click.echo(f"{kind}: {seen['count']} (first: {seen['first']}; latest: {seen['latest']})")

    emit(state, as_json, human)
    if problems:
        sys.exit(1)
