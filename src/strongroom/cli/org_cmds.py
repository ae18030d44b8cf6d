"""`strongroom org|client|group ...`: an admin's organizations, clients and groups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from strongroom.cli.common import Group, admin_options, console, emit, json_option, open_client


def _table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    t = Table(*columns)
    for r in rows:
        t.add_row(*("" if r.get(c) is None else str(r.get(c)) for c in columns))
    console().print(t)


@click.group(cls=Group)
def org() -> None:
    """Organizations and their registration secrets (admin)."""


@org.command("create")
@click.argument("name")
@admin_options
@json_option
def org_create(name: str, data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Create an organization; its auth secret is printed once.

    \b
    Example:
      strongroom org create finance --data /var/lib/strongroom
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        emit(c.create_org(name), as_json, lambda o: click.echo(f"organization {o['name']}: auth secret {o['auth_secret']}"))


@org.command("list")
@admin_options
@json_option
def org_list(data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """List organizations.

    \b
    Example:
      strongroom org list --data /var/lib/strongroom --json
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        emit(c.list_orgs(), as_json, lambda rows: _table(rows, ["name", "clients", "created"]))


@org.command("rotate-secret")
@click.argument("name")
@admin_options
@json_option
def org_rotate(name: str, data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Replace an organization's auth secret; the old one stops working at once.

    \b
    Example:
      strongroom org rotate-secret finance --data /var/lib/strongroom
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        emit(
            c.rotate_org_secret(name),
            as_json,
            lambda o: click.echo(f"organization {o['name']}: new auth secret {o['auth_secret']}"),
        )


@click.group("client", cls=Group)
def client_group() -> None:
    """Registered clients (admin): list, disable, enable, revoke."""


@client_group.command("list")
@admin_options
@json_option
def client_list(data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """List registered clients.

    \b
    Example:
      strongroom client list --data /var/lib/strongroom
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        emit(c.list_clients(), as_json, lambda rows: _table(rows, ["client_id", "name", "org", "role", "status"]))


def _status_command(action: str, doc: str) -> click.Command:
    @click.argument("client_id")
    @admin_options
    @json_option
    def cmd(client_id: str, data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
        with open_client(profile, servers, data_dir, admin=True) as c:
            emit(c.set_client_status(client_id, action), as_json, lambda o: click.echo(f"{o['client_id']}: {o['status']}"))

    cmd.__doc__ = f"{doc}\n\n\b\nExample:\n  strongroom client {action} c_0123456789abcdef --data /var/lib/strongroom"
    return click.command(action)(cmd)


client_group.add_command(_status_command("disable", "Refuse a client's requests until enabled again."))
client_group.add_command(_status_command("enable", "Accept a disabled client again."))
client_group.add_command(_status_command("revoke", "Refuse a client for good, from its next request on."))


@click.group("group", cls=Group)
def group_group() -> None:
    """Groups of clients within an organization, for deposit policies (admin)."""


@group_group.command("create")
@click.argument("name")
@click.option("--org", "org_name", default="default", show_default=True)
@admin_options
@json_option
def group_create(
    name: str, org_name: str, data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool
) -> None:
    """Create a group.

    \b
    Example:
      strongroom group create dbhosts --org default --data /var/lib/strongroom
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        emit(c.create_group(org_name, name), as_json, lambda o: click.echo(f"group {o['name']} created in {o['org']}"))


@group_group.command("add")
@click.argument("name")
@click.argument("client_ids", nargs=-1, required=True)
@click.option("--org", "org_name", default="default", show_default=True)
@admin_options
@json_option
def group_add(
    name: str,
    client_ids: tuple[str, ...],
    org_name: str,
    data_dir: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
    as_json: bool,
) -> None:
    """Add clients to a group.

    \b
    Example:
      strongroom group add dbhosts c_0123456789abcdef --data /var/lib/strongroom
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        emit(
            c.change_group(org_name, name, add=list(client_ids)),
            as_json,
            lambda o: click.echo(f"{o['name']}: {', '.join(o['members'])}"),
        )


@group_group.command("rm")
@click.argument("name")
@click.argument("client_ids", nargs=-1)
@click.option("--org", "org_name", default="default", show_default=True)
@admin_options
@json_option
def group_rm(
    name: str,
    client_ids: tuple[str, ...],
    org_name: str,
    data_dir: Path | None,
    profile: Path | None,
    servers: tuple[str, ...],
    as_json: bool,
) -> None:
    """Remove clients from a group; with no client, delete the group.

    \b
    Example:
      strongroom group rm dbhosts c_0123456789abcdef --data /var/lib/strongroom
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        if client_ids:
            emit(
                c.change_group(org_name, name, remove=list(client_ids)),
                as_json,
                lambda o: click.echo(f"{o['name']}: {', '.join(o['members']) or '(empty)'}"),
            )
        else:
            emit(c.delete_group(org_name, name), as_json, lambda o: click.echo(f"group {o['name']} deleted"))


@group_group.command("ls")
@click.option("--org", "org_name", default="default", show_default=True)
@admin_options
@json_option
def group_ls(org_name: str, data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """List groups and their members.

    \b
    Example:
      strongroom group ls --org default --data /var/lib/strongroom
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        emit(
            c.list_groups(org_name),
            as_json,
            lambda rows: _table([{**r, "members": " ".join(r["members"])} for r in rows], ["name", "members"]),
        )
