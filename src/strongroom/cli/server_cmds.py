"""`strongroom server ...`: creating, running, sealing, backing up and auditing a key trustee server."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from strongroom.cli.common import (
    CliError,
    Group,
    admin_options,
    data_option,
    emit,
    json_option,
    open_client,
    passphrase_option,
    read_passphrase,
    require_data,
)
from strongroom.cli.unlock import (
    check_counts,
    holder_from,
    holder_options,
    link_of,
    print_shares,
    read_shares,
    read_unlock,
    unlock_errors,
    unlock_options,
)


@click.group(cls=Group)
def server() -> None:
    """Create, run, unseal, back up and audit a key trustee server."""


@server.command("init")
@data_option
@click.option("--db", "db_url", help="Database URL: sqlite:///PATH (default: a file in the data dir) or postgresql://...")
@click.option(
    "--san", "names", multiple=True, help="A DNS name or IP for the TLS certificate (repeatable; default localhost, 127.0.0.1)."
)
@click.option("--org", default="default", show_default=True, help="Name of the first organization.")
@click.option("--server-url", help="URL written into the admin profile (default https://NAME:8443).")
@click.option("--deposit-limit", type=click.IntRange(1, 64 << 20), help="Largest deposit in bytes (default 1 MiB).")
@click.option(
    "--entropy-mix",
    metavar="SOURCE",
    help="Mix a health-tested hardware source (rdrand, rdseed, hwrng) into the entropy service.",
)
@click.option("--key-shares", type=click.IntRange(1, 16), help="Seal with this many unseal shares instead of a passphrase.")
@click.option("--key-threshold", type=click.IntRange(1, 16), help="How many of the shares unseal.")
@holder_options
@passphrase_option
@json_option
def server_init(
    data_dir: Path | None,
    db_url: str | None,
    names: tuple[str, ...],
    org: str,
    server_url: str | None,
    deposit_limit: int | None,
    entropy_mix: str | None,
    key_shares: int | None,
    key_threshold: int | None,
    passphrase_file: Path | None,
    as_json: bool,
    **holder_kw: Any,
) -> None:
    """Create a server: database, TLS CA and certificate, sealed master key, admin credential, first org.

    \b
    Example:
      strongroom server init --data /var/lib/strongroom --passphrase-file /root/pw
    """
    from strongroom.server.setup import check_entropy_mix, init_server

    data = require_data(data_dir)
    check_entropy_mix(entropy_mix)  # before the passphrase prompt
    from strongroom.server import barrier
    from strongroom.server.hsm import HsmError

    if (key_shares is None) != (key_threshold is None):
        raise CliError("give both --key-shares and --key-threshold")
    n, m = key_shares or 0, key_threshold or 0
    if n:
        check_counts(n, m)
    if passphrase_file is not None and (n or any(holder_kw.get(k) for k in ("hsm_lib", "transit_address"))):
        raise CliError("--passphrase-file goes with a passphrase seal, not with --key-shares, an HSM or a transit seal")
    holder = holder_from(holder_kw)
    if holder is not None:
        unlock = barrier.Unlock(hsm=link_of(holder))
    elif n:
        unlock = barrier.Unlock()
    else:
        unlock = barrier.Unlock(passphrase=read_passphrase(passphrase_file, confirm=True, what="New server passphrase"))
    try:
        res = init_server(data, unlock, db_url, list(names) or None, org, server_url, deposit_limit, entropy_mix, n, m, holder)
    except HsmError as e:
        raise CliError(str(e)) from None
    out = {
        "data": str(data.path),
        "org": res.org,
        "auth_secret": res.auth_secret,
        "admin_profile": str(res.admin_profile),
        "admin_id": res.admin_id,
        "ca": str(data.ca_file),
        "seal": res.seal,
        "shares": res.shares,
    }

    def human(o: dict[str, Any]) -> None:
        click.echo(f"Server created in {o['data']}, unsealed with {res.seal}.")
        if res.shares:
            print_shares(res.shares, m)
        click.echo(f"Organization {o['org']}: auth secret (shown once, keep it safe):\n  {o['auth_secret']}")
        click.echo(f"Admin profile: {o['admin_profile']}   CA certificate: {o['ca']}")

    emit(out, as_json, human)


@server.command("start")
@data_option
@click.option("--listen", default="127.0.0.1:8443", show_default=True, help="HOST:PORT to serve HTTPS on.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64), help="Worker processes.")
@click.option("--kmip-listen", default=None, metavar="HOST:PORT", help="Also serve KMIP (TLS, client certificates) here.")
@click.option("--sealed", is_flag=True, help="Start sealed, without asking for the passphrase.")
@click.option("--log-level", default="warning", show_default=True, type=click.Choice(["debug", "info", "warning", "error"]))
@passphrase_option
@click.option("--share-file", "share_files", multiple=True, type=click.Path(dir_okay=False, path_type=Path), help="Shares.")
def server_start(
    data_dir: Path | None,
    listen: str,
    workers: int,
    kmip_listen: str | None,
    sealed: bool,
    log_level: str,
    passphrase_file: Path | None,
    share_files: tuple[Path, ...],
) -> None:
    """Serve the API over HTTPS until SIGTERM or SIGINT.

    A server sealed with a passphrase asks for it (or --sealed); one sealed with shares starts
    sealed unless --share-file gives enough; one sealed by an HSM unseals itself.

    \b
    Example:
      strongroom server start --data /var/lib/strongroom --passphrase-file /root/pw --workers 2
      strongroom server start --data /var/lib/strongroom --kmip-listen 0.0.0.0:5696
    """
    import logging

    from strongroom.server.errors import StorageUnavailable
    from strongroom.server.maintenance import seal_of
    from strongroom.server.run import StartError, serve, unsealed_barrier

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    data = require_data(data_dir)
    data.load_config()
    bar = None
    try:
        kind = seal_of(data).kind
    except (StorageUnavailable, ValueError):
        kind = "passphrase"  # the start reports the database; a passphrase server asks as always
    if kind == "shares" and not share_files:
        sealed = True
        click.echo("starting sealed: give the unseal shares with 'strongroom server unseal --share'", err=True)
    if kind in ("pkcs11", "transit") and not share_files:
        sealed = True  # the writer process asks the key holder (a PKCS#11 module must not cross a fork)
    if not sealed:
        try:
            bar = unsealed_barrier(data, read_unlock(data_dir, passphrase_file, share_files))
        except unlock_errors() as e:
            raise CliError(str(e)) from None
    try:
        code = serve(data, listen, workers, bar, log_level, kmip_listen)
    except StartError as e:
        raise CliError(str(e)) from None
    sys.exit(code)


@server.command("set-entropy-mix")
@data_option
@click.argument("source")
@json_option
def server_set_entropy_mix(data_dir: Path | None, source: str, as_json: bool) -> None:
    """Mix a health-tested hardware source into the entropy service (rdrand, rdseed, hwrng or
    hwrng:PATH), or stop mixing (none).  Output stays at least as strong as getrandom alone.
    Takes effect when the server is next started.

    \b
    Example:
      strongroom server set-entropy-mix rdseed --data /var/lib/strongroom
    """
    from strongroom.server.setup import check_entropy_mix

    data = require_data(data_dir)
    config = data.load_config()
    config.entropy_mix = check_entropy_mix(source)
    data.write_config(config)
    emit(
        {"entropy_mix": config.entropy_mix, "restart_needed": True},
        as_json,
        lambda o: click.echo(f"entropy mix: {o['entropy_mix'] or 'none (getrandom alone)'}; restart the server to apply"),
    )


@server.command("seal")
@admin_options
@json_option
def server_seal(data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Seal every process of a running server: deposits are refused until unsealed.

    \b
    Example:
      strongroom server seal --data /var/lib/strongroom
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        emit(c.seal(), as_json, lambda o: click.echo("sealed"))


@server.command("rotate-master-key")
@admin_options
@json_option
def server_rotate(data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Re-wrap every data key under a new master key while serving; the old one then opens nothing.

    \b
    Example:
      strongroom server rotate-master-key --data /var/lib/strongroom
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        emit(c.rotate_master_key(), as_json, lambda o: click.echo(f"master key rotated; generation {o['generation']}"))


@server.command("backup")
@data_option
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Backup file to write.")
@unlock_options
@json_option
def server_backup(
    data_dir: Path | None, out_path: Path, passphrase_file: Path | None, share_files: tuple[Path, ...], as_json: bool
) -> None:
    """Write a consistent, encrypted backup (database and data dir) while the server runs.

    \b
    Example:
      strongroom server backup --data /var/lib/strongroom --out /backup/strongroom.srb --passphrase-file /root/pw
    """
    from strongroom.server.backup import write_backup_file

    data = require_data(data_dir)
    try:
        counts = write_backup_file(data, read_unlock(data_dir, passphrase_file, share_files), out_path)
    except unlock_errors() as e:
        raise CliError(str(e)) from None
    emit(
        {"out": str(out_path), "rows": counts},
        as_json,
        lambda o: click.echo(f"backup written to {o['out']} ({sum(counts.values())} rows)"),
    )


@server.command("restore")
@data_option
@click.option("--in", "in_path", required=True, type=click.Path(dir_okay=False, exists=True, path_type=Path), help="Backup file.")
@click.option("--db", "db_url", help="Empty database to restore into (default: SQLite in the data dir).")
@unlock_options
@json_option
def server_restore(
    data_dir: Path | None,
    in_path: Path,
    db_url: str | None,
    passphrase_file: Path | None,
    share_files: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Restore a backup into an empty data dir (and empty database).

    \b
    Example:
      strongroom server restore --data /var/lib/strongroom-new --in /backup/strongroom.srb
    """
    from strongroom.server.backup import BackupError, restore
    from strongroom.server.barrier import Unlock

    data = require_data(data_dir)
    try:
        with in_path.open("rb") as f:
            unlock = Unlock(shares=tuple(read_shares(share_files))) if share_files else Unlock(read_passphrase(passphrase_file))
            counts = restore(data, unlock, f, db_url)
    except BackupError as e:
        raise CliError(str(e)) from None
    except unlock_errors() as e:
        raise CliError(str(e)) from None
    emit({"data": str(data.path), "rows": counts}, as_json, lambda o: click.echo(f"restored into {o['data']}"))


@server.group("audit", cls=Group)
def audit_group() -> None:
    """Check and read the tamper-evident audit log."""


@audit_group.command("verify")
@data_option
@unlock_options
@click.option(
    "--checkpoint",
    "checkpoints",
    multiple=True,
    metavar="SEQ:MAC",
    help="A head printed earlier by `server audit checkpoint` (repeatable): the chain must still hold it.",
)
@json_option
def audit_verify(
    data_dir: Path | None,
    passphrase_file: Path | None,
    share_files: tuple[Path, ...],
    checkpoints: tuple[str, ...],
    as_json: bool,
) -> None:
    """Check the whole chain; exit 1 and name the first bad entry if anything was altered.

    \b
    Example:
      strongroom server audit verify --data /var/lib/strongroom --passphrase-file /root/pw
      strongroom server audit verify --data /var/lib/strongroom --checkpoint "$(cat /mnt/elsewhere/audit.checkpoint)"
    """
    res, _ = _verified(data_dir, passphrase_file, share_files, checkpoints)
    out = {"ok": res.ok, "entries": res.entries, "first_bad": res.first_bad, "reason": res.reason}
    emit(
        out,
        as_json,
        lambda o: click.echo(f"audit log intact: {o['entries']} entries" if o["ok"] else f"audit log damaged: {o['reason']}"),
    )
    if not res.ok:
        sys.exit(1)


@audit_group.command("checkpoint")
@data_option
@unlock_options
@json_option
def audit_checkpoint(data_dir: Path | None, passphrase_file: Path | None, share_files: tuple[Path, ...], as_json: bool) -> None:
    """Verify the chain, then print its head as SEQ:MAC, to keep somewhere the servers cannot write
    (a later `audit verify --checkpoint` fails if the chain lost or changed that entry, whichever
    server wrote it).  Exit 1, printing nothing to keep, if the chain does not verify.

    \b
    Example:
      strongroom server audit checkpoint --data /var/lib/strongroom > /mnt/elsewhere/audit.checkpoint
    """
    res, (seq, mac) = _verified(data_dir, passphrase_file, share_files, ())
    if not res.ok:
        raise CliError(f"audit log damaged: {res.reason}")
    emit({"checkpoint": f"{seq}:{mac.hex()}", "seq": seq}, as_json, lambda o: click.echo(o["checkpoint"]))


def _verified(
    data_dir: Path | None, passphrase_file: Path | None, share_files: tuple[Path, ...], checkpoints: tuple[str, ...]
) -> Any:
    from strongroom.server import audit
    from strongroom.server.maintenance import verify_audit

    data = require_data(data_dir)
    try:
        parsed = tuple(audit.parse_checkpoint(c) for c in checkpoints)
    except ValueError as e:
        raise CliError(str(e)) from None
    try:
        return verify_audit(data, read_unlock(data_dir, passphrase_file, share_files), parsed)
    except unlock_errors() as e:
        raise CliError(str(e)) from None


@audit_group.command("tail")
@admin_options
@click.option("-n", "limit", default=20, show_default=True, type=click.IntRange(1, 1000))
@click.option("--follow", "-f", is_flag=True, help="Keep printing new entries.")
@json_option
def audit_tail(
    data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], limit: int, follow: bool, as_json: bool
) -> None:
    """Print the newest audit entries.

    \b
    Example:
      strongroom server audit tail --data /var/lib/strongroom -n 50 --follow
    """

    def show(rows: list[dict[str, Any]]) -> None:
        for r in rows:
            if as_json:
                click.echo(json.dumps(r, sort_keys=True))
            else:
                when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r["ts"]))
                detail = " ".join(f"{k}={v}" for k, v in sorted(r["detail"].items()))
                click.echo(f"{r['seq']:>8} {when} {r['actor']:<20} {r['action']:<18} {r['outcome']:<7} {r['target']} {detail}")

    with open_client(profile, servers, data_dir, admin=True) as c:
        rows = c.audit_tail(-1, limit)
        if as_json and not follow:
            emit(rows, True)
            return
        show(rows)
        last = rows[-1]["seq"] if rows else 0
        while follow:
            time.sleep(1)
            rows = c.audit_tail(last, 1000)
            show(rows)
            if rows:
                last = rows[-1]["seq"]


# -- organizations, clients, groups ------------------------------------------------------------
