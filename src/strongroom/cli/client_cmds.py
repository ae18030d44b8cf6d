"""`strongroom register|put|get|ls|rm|entropy|whoami`: a host's view of the trustee (deposit
policies: `strongroom policy deposit`, cli/vault_cmds.py)."""

from __future__ import annotations

import datetime
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from strongroom.cli.common import CliError, console, emit, json_option, open_client, profile_option
from strongroom.cli.profile_cmds import key_store_from, key_store_options
from strongroom.client.profile import default_path

_DURATION = re.compile(r"^(\d+)([smhd]?)$", re.ASCII)  # "٣" is no number here


def parse_when(value: str | None) -> float | None:
    """A duration from now (90, 30m, 12h, 7d) or an ISO 8601 time, as Unix time."""
    if value is None:
        return None
    m = _DURATION.match(value.strip())
    if m:
        mult = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
        return datetime.datetime.now(datetime.UTC).timestamp() + int(m.group(1)) * mult
    try:
        t = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise CliError(f"not a duration (30m, 12h, 7d) or ISO 8601 time: {value!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.UTC)
    return t.timestamp()


def policy_options(f: Any) -> Any:
    f = click.option("--reader", "readers", multiple=True, help="client:ID or group:NAME allowed to get it (repeatable).")(f)
    f = click.option("--expires", help="Refuse gets after this: a duration (12h, 7d) or an ISO 8601 time.")(f)
    f = click.option("--not-before", help="Refuse gets before this: a duration or an ISO 8601 time.")(f)
    f = click.option("--max-retrievals", type=click.IntRange(1, 2**31 - 1), help="Allow this many gets in all.")(f)
    approver = "client:ID or group:NAME who may approve a release (repeatable)."
    f = click.option("--approver", "approvers", multiple=True, help=approver)(f)
    f = click.option("--approvals-required", type=click.IntRange(0, 100), help="Approvals each release needs (M of them).")(f)
    return click.option("--approval-window", help="An approval releases for this long (30m, 8h) instead of for one get.")(f)


def _policy(
    readers: tuple[str, ...],
    expires: str | None,
    not_before: str | None,
    max_retrievals: int | None,
    approvers: tuple[str, ...] = (),
    approvals_required: int | None = None,
    approval_window: str | None = None,
) -> dict[str, Any]:
    """The client API's policy keywords from the CLI's policy options."""
    return {
        "readers": list(readers),
        "expires_at": parse_when(expires),
        "not_before": parse_when(not_before),
        "max_retrievals": max_retrievals,
        "approvers": list(approvers),
        "approvals_required": approvals_required or 0,
        "approval_window": parse_seconds(approval_window) if approval_window else 0,
    }


def parse_seconds(text: str) -> int:
    """A duration: seconds, or a number with s, m, h or d."""
    m = re.fullmatch(r"([0-9]{1,9})([smhd]?)", text.strip())
    if m is None:
        raise CliError(f"not a duration: {text!r} (use 90, 30m, 8h or 2d)")
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


@click.command("register")
@click.option("--server", "servers", multiple=True, required=True, help="Server URL (repeat for failover).")
@click.option("--org", required=True, help="Organization to join.")
@click.option(
    "--auth-secret",
    envvar="STRONGROOM_AUTH_SECRET",
    required=True,
    help="The organization's auth secret (or STRONGROOM_AUTH_SECRET).",
)
@click.option(
    "--ca", "ca_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), help="CA certificate of the server."
)
@click.option("--name", default=None, help="A name for this host (default: its hostname).")
@click.option(
    "--profile", envvar="STRONGROOM_PROFILE", type=click.Path(file_okay=False, path_type=Path), help="Where to store the profile."
)
@click.option("--force", is_flag=True, help="Replace an existing profile.")
@key_store_options
@json_option
def register(
    servers: tuple[str, ...],
    org: str,
    auth_secret: str,
    ca_file: Path | None,
    name: str | None,
    profile: Path | None,
    force: bool,
    as_json: bool,
    **key_kw: Any,
) -> None:
    """Make this host's keypair, register its public key, and save the profile (0600).

    \b
    Example:
      strongroom register --server https://trustee:8443 --ca ca.pem --org default --auth-secret "$SECRET"
    """
    path = profile if profile is not None else default_path()
    if (path / "profile.json").exists() and not force:
        raise CliError(f"a profile already exists at {path}; pass --force to replace it")
    hostname = re.sub(r"[^A-Za-z0-9._@-]", "-", socket.gethostname())[:100] or "host"
    from strongroom.client import Client
    from strongroom.client.keystore import KeyStoreError

    store = key_store_from(key_kw)
    try:
        c = Client.register(list(servers), org, auth_secret, name or hostname, path, ca_file, key_store=store)
    except KeyStoreError as e:
        raise CliError(str(e)) from None
    c.close()
    emit(
        {"client_id": c.client_id, "profile": str(path), "org": org},
        as_json,
        lambda o: click.echo(f"registered as {o['client_id']}; profile in {o['profile']}"),
    )


@click.command("whoami")
@profile_option
@json_option
def whoami(profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Show this client's identity as the server sees it.

    \b
    Example:
      strongroom whoami --profile ~/.config/strongroom
    """
    with open_client(profile, servers) as c:
        emit(c.whoami(), as_json, lambda o: click.echo(f"{o['client_id']} ({o['name']}, org {o['org']}, {o['role']})"))


@click.command("put")
@click.argument("name")
@click.argument("source", default="-", type=click.File("rb"))
@policy_options
@profile_option
@json_option
def put(
    name: str,
    source: Any,
    readers: tuple[str, ...],
    expires: str | None,
    not_before: str | None,
    max_retrievals: int | None,
    approvers: tuple[str, ...],
    approvals_required: int | None,
    approval_window: str | None,
    profile: Path | None,
    servers: tuple[str, ...],
    as_json: bool,
) -> None:
    """Deposit a key or secret from FILE or stdin; a put on an existing name adds a version.

    \b
    Example:
      strongroom put db-key key.bin --reader group:dbhosts --expires 30d --max-retrievals 10
    """
    data = source.read()
    kw: dict[str, Any] = {}
    policy = (readers, expires, not_before, max_retrievals, approvers, approvals_required, approval_window)
    if any(v not in (None, ()) for v in policy):
        kw = _policy(*policy)  # a put without options keeps the policy
    with open_client(profile, servers) as c:
        version = c.put(name, data, **kw)
    emit({"name": name, "version": version}, as_json, lambda o: click.echo(f"{o['name']}: version {o['version']}"))


@click.command("get")
@click.argument("name")
@click.option("--version", type=click.IntRange(1), help="A version (default: the latest).")
@click.option("--owner", help="The owner's client id, for a deposit shared with you.")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file (mode 0600) instead of stdout."
)
@profile_option
@json_option
def get(
    name: str,
    version: int | None,
    owner: str | None,
    output: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
    as_json: bool,
) -> None:
    """Retrieve a deposit (policy permitting).

    \b
    Example:
      strongroom get db-key -o /run/keys/db.key
    """
    import base64

    with open_client(profile, servers) as c:
        data = c.get(name, version=version, owner=owner)
    if as_json:
        emit({"name": name, "data": base64.b64encode(data).decode()}, True)
    elif output is not None:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()


@click.command("ls")
@click.option("--shared", is_flag=True, help="List deposits others shared with you instead of your own.")
@profile_option
@json_option
def ls(shared: bool, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """List deposits (a KMIP object is deposit kmip-ID, shown with its type and state).

    \b
    Example:
      strongroom ls --shared --json
    """

    def human(rows: list[dict[str, Any]]) -> None:
        t = Table("name", "owner", "versions", "gets", "readers", "expires", "max gets", "kmip")
        for r in rows:
            kmip = r.get("kmip")
            p = r["policy"]
            exp = (
                datetime.datetime.fromtimestamp(p["expires_at"], datetime.UTC).isoformat(timespec="seconds")
                if p["expires_at"]
                else ""
            )
            t.add_row(
                r["name"],
                r["owner"],
                str(r["latest_version"]),
                str(r["retrievals"]),
                " ".join(p["readers"]),
                exp,
                str(p["max_retrievals"] or ""),
                f"{kmip['type']} {kmip['state']}" if kmip else "",
            )
        console().print(t)

    with open_client(profile, servers) as c:
        emit(c.list(shared=shared), as_json, human)


@click.command("rm")
@click.argument("name")
@profile_option
@json_option
def rm(name: str, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Delete a deposit of yours with all its versions.

    \b
    Example:
      strongroom rm old-db-key
    """
    with open_client(profile, servers) as c:
        c.delete(name)
    emit({"name": name, "deleted": True}, as_json, lambda o: click.echo(f"{name}: deleted"))


@click.command("entropy")
@click.option("--bytes", "n", default=32, show_default=True, type=click.IntRange(1, 65536), help="How many bytes.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write raw bytes to this file.")
@profile_option
@json_option
def entropy(n: int, output: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Draw random bytes from the server (getrandom(2) on the server); hex on a terminal.

    \b
    Example:
      strongroom entropy --bytes 32 -o seed.bin
    """
    with open_client(profile, servers) as c:
        data = c.entropy(n)
    if as_json:
        emit({"bytes": n, "hex": data.hex()}, True)
    elif output is not None:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    elif sys.stdout.isatty():
        click.echo(data.hex())
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()


@click.command("approvals")
@profile_option
@json_option
def approvals(profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Release requests waiting for your approval, and your own requests.

    \b
    Example:
      strongroom approvals
    """
    with open_client(profile, servers) as c:
        rows = c.approvals()

    def human(o: list[dict[str, Any]]) -> None:
        for r in o:
            got = f"{len(r['approvals'])}/{r['required']}"
            click.echo(f"{r['id']}  {r['state']:<9} {r['deposit']}  by {r['requester']}  approvals {got}")

    emit(rows, as_json, human)


def _vote(request_id: str, approve: bool, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    with open_client(profile, servers) as c:
        out = c.approve(request_id) if approve else c.deny(request_id)
    emit(out, as_json, lambda o: click.echo(f"{o['id']}: {o['state']} ({len(o['approvals'])} of {o['required']} approvals)"))


@click.command("approve")
@click.argument("request_id")
@profile_option
@json_option
def approve(request_id: str, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Approve a pending release request of a deposit you are an approver of.

    \b
    Example:
      strongroom approve apr_Zk3...
    """
    _vote(request_id, True, profile, servers, as_json)


@click.command("deny")
@click.argument("request_id")
@profile_option
@json_option
def deny(request_id: str, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Deny a pending release request (one denial denies it).

    \b
    Example:
      strongroom deny apr_Zk3...
    """
    _vote(request_id, False, profile, servers, as_json)


COMMANDS = [register, whoami, put, get, ls, rm, entropy, approvals, approve, deny]
