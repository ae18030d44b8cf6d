"""`strongroom server unseal|seal-status|rekey|migrate-seal`: the seal of a server."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import click

from strongroom.cli.common import (
    CliError,
    admin_options,
    data_option,
    emit,
    json_option,
    open_client,
    read_passphrase,
    require_data,
)
from strongroom.cli.server_cmds import server
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


@server.command("unseal")
@admin_options
@click.option("--share", "use_share", is_flag=True, help="Give one share (prompted, or the lines of --share-file).")
@click.option("--reset", is_flag=True, help="Forget the shares given so far.")
@click.option("--auto", "auto", is_flag=True, help="After an admin's seal: let the HSM or transit seal unseal again.")
@unlock_options
@json_option
def server_unseal(
    data_dir: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
    use_share: bool,
    reset: bool,
    auto: bool,
    passphrase_file: Path | None,
    share_files: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Unseal a running server (every process on its database follows): with the passphrase,
    or share by share; several admins may each give theirs, to any server on the database.

    \b
    Examples:
      strongroom server unseal --data /var/lib/strongroom --passphrase-file /root/pw
      strongroom server unseal --data /var/lib/strongroom --share
      strongroom server unseal --data /var/lib/strongroom --reset
    """

    def human(o: dict[str, Any]) -> None:
        if not o["sealed"]:
            click.echo("unsealed" if o.get("changed") else "already unsealed")
        elif reset:
            click.echo("shares forgotten; still sealed")
        else:
            need = o["threshold"] - o["progress"]
            click.echo(f"share accepted: {o['progress']} of {o['threshold']} given; {need} more needed")

    with open_client(profile, servers, data_dir, admin=True) as c:
        if reset or auto:
            answer = c.unseal(reset=True) if reset else c.unseal(auto=True)
            emit(answer, as_json, lambda o: click.echo("the seal's key holder may unseal it again") if auto else human(o))
            return
        if not (use_share or share_files):
            emit(c.unseal(read_passphrase(passphrase_file)), as_json, human)
            return
        texts = read_shares(share_files) if share_files else [getpass.getpass("Share: ")]
        out: dict[str, Any] = {}
        for text in texts:
            out = c.unseal(share=text)
            if not out["sealed"]:
                break
        emit(out, as_json, human)


@server.command("seal-status")
@admin_options
@json_option
def server_seal_status(data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Whether the server is sealed, how it is unsealed, and how many shares have been given.

    \b
    Example:
      strongroom server seal-status --data /var/lib/strongroom
    """

    def human(o: dict[str, Any]) -> None:
        state = "sealed" if o["sealed"] else "unsealed"
        how = {"passphrase": "a passphrase", "pkcs11": "an HSM"}.get(o["seal"], f"{o['threshold']} of {o['shares']} shares")
        tail = f"; {o['progress']} of {o['threshold']} shares given" if o["sealed"] and o["seal"] == "shares" else ""
        click.echo(f"{state}; seal: {how}{tail}")

    with open_client(profile, servers, data_dir, admin=True) as c:
        emit(c.seal_status(), as_json, human)


@server.command("rekey")
@admin_options
@click.option("--key-shares", type=click.IntRange(1, 16), help="Start a rekey: how many new shares.")
@click.option("--key-threshold", type=click.IntRange(1, 16), help="Start a rekey: how many of them will unseal.")
@click.option("--nonce", help="Give a current share to the rekey with this nonce (prompted, or --share-file).")
@click.option("--cancel", is_flag=True, help="Cancel the rekey in progress.")
@click.option(
    "--share-file", "share_files", multiple=True, type=click.Path(dir_okay=False, path_type=Path), help="Current shares."
)
@json_option
def server_rekey(
    data_dir: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
    key_shares: int | None,
    key_threshold: int | None,
    nonce: str | None,
    cancel: bool,
    share_files: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Make new unseal shares (new count and threshold) once enough current shares are given;
    the old shares then open nothing.  Deposits are not touched.

    \b
    Examples:
      strongroom server rekey --data /var/lib/strongroom --key-shares 5 --key-threshold 3
      strongroom server rekey --data /var/lib/strongroom --nonce NONCE        # each holder
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        if cancel:
            emit(c.rekey({"cancel": True}), as_json, lambda o: click.echo("rekey cancelled"))
            return
        if key_shares is not None or key_threshold is not None:
            if key_shares is None or key_threshold is None:
                raise CliError("give both --key-shares and --key-threshold")
            out = c.rekey({"shares": key_shares, "threshold": key_threshold})
            if not (nonce or share_files):
                emit(out, as_json, lambda o: click.echo(f"rekey started; nonce {o['nonce']}; give {o['required']} shares"))
                return
            nonce = out["nonce"]
        if nonce is None:
            emit(c.rekey_status(), as_json, lambda o: click.echo(f"rekey: {o}"))
            return
        texts = read_shares(share_files) if share_files else [getpass.getpass("Current share: ")]
        for text in texts:
            out = c.rekey({"nonce": nonce, "share": text})
            if out.get("complete"):
                break

    def human(o: dict[str, Any]) -> None:
        if o.get("complete"):
            print_shares(o["shares"], o["threshold"])
        else:
            click.echo(f"share accepted: {o['progress']} of {o['required']} given")

    emit(out, as_json, human)


@server.command("migrate-seal")
@data_option
@click.option("--to", "kind", required=True, type=click.Choice(["passphrase", "shares", "hsm", "transit"]), help="The new seal.")
@click.option("--key-shares", type=click.IntRange(0, 16), default=0, help="Shares (with --to hsm or transit: recovery shares).")
@click.option("--key-threshold", type=click.IntRange(0, 16), default=0)
@click.option("--new-passphrase-file", type=click.Path(dir_okay=False, path_type=Path), help="With --to passphrase.")
@holder_options
@unlock_options
@json_option
def server_migrate_seal(
    data_dir: Path | None,
    kind: str,
    key_shares: int,
    key_threshold: int,
    new_passphrase_file: Path | None,
    passphrase_file: Path | None,
    share_files: tuple[Path, ...],
    as_json: bool,
    **holder_kw: Any,
) -> None:
    """Move the master key to another seal (passphrase, shares, HSM, another server's transit
    key) in one transaction: a crash leaves the old seal or the new one.  Needs the current
    seal's material; servers on the database follow within a second.

    \b
    Example:
      strongroom server migrate-seal --data /var/lib/strongroom --passphrase-file /root/pw \\
          --to hsm --hsm-lib /usr/lib/softhsm/libsofthsm2.so --hsm-token strongroom \\
          --hsm-pin-file /etc/strongroom/pin --key-shares 3 --key-threshold 2
    """
    from strongroom.server import barrier
    from strongroom.server.hsm import ServerHsm
    from strongroom.server.maintenance import migrate_seal

    data = require_data(data_dir)
    holder = holder_from(holder_kw)
    if (kind in ("hsm", "transit")) != (holder is not None) or (kind == "hsm") != isinstance(holder, ServerHsm):
        raise CliError(f"--to {kind} needs its options (and only those): see --help")
    current = read_unlock(data_dir, passphrase_file, share_files)
    if kind == "passphrase":
        target = barrier.Unlock(passphrase=read_passphrase(new_passphrase_file, confirm=True, what="New passphrase"))
        key_shares = key_threshold = 0
    elif kind == "shares":
        if not key_shares:
            raise CliError("--to shares needs --key-shares and --key-threshold")
        target = barrier.Unlock()
    else:
        target = barrier.Unlock(hsm=link_of(holder))
    if key_shares:
        check_counts(key_shares, key_threshold)
    handed: list[str] = []
    new_kind = {"hsm": "pkcs11"}.get(kind, kind)

    def hand_out(made: list[str]) -> None:  # before the commit: no seal in force whose shares nobody saw
        handed.extend(made)
        if as_json:
            emit({"seal": new_kind, "shares": made}, True)
        elif made:
            print_shares(made, key_threshold)

    try:
        after = migrate_seal(data, current, target, key_shares, key_threshold, holder, hand_out)
    except unlock_errors() as e:
        raise CliError(str(e)) from None
    except Exception:
        if handed:
            click.echo("the seal was NOT changed: the shares above open nothing; the old seal still holds", err=True)
        raise
    if not as_json:
        click.echo(f"seal migrated: now {after.describe()}")


@server.command("admin-add")
@admin_options
@click.option("--name", required=True, help="The new admin's name (e.g. a share holder's).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Its profile dir.")
@json_option
def server_admin_add(
    data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], name: str, out_dir: Path, as_json: bool
) -> None:
    """Make another admin credential (keypair made here, saved in --out, mode 0600): each share
    holder can give unseal and rekey shares under their own name.

    \b
    Example:
      strongroom server admin-add --data /var/lib/strongroom --name alice --out /root/alice
    """
    from strongroom.client.profile import Profile
    from strongroom.crypto.identity import Identity

    if (out_dir / "profile.json").exists():
        raise CliError(f"a profile already exists at {out_dir}")
    identity = Identity.generate()
    with open_client(profile, servers, data_dir, admin=True) as c:
        out = c.create_admin(name, identity.public_bytes())
        ca = Path(c.ca_file).read_bytes() if c.ca_file else None
        Profile(out_dir, list(c.servers), out["client_id"], identity, name, None, "admin").save(ca)
    done = {**out, "profile": str(out_dir)}
    emit(done, as_json, lambda o: click.echo(f"admin {o['name']} is {o['client_id']}; profile in {o['profile']}"))
