"""`strongroom token …` and `strongroom policy …`: tokens for the Vault-compatible API, its ACL
policies (the admin credential), and a deposit's own policy (`policy deposit`)."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

import click

from strongroom.cli.client_cmds import _policy, policy_options
from strongroom.cli.common import CliError, admin_options, emit, json_option, open_client, profile_option


@click.group("token")
def token() -> None:
    """Tokens for the Vault-compatible API (hvac, the bao CLI, SOPS), acting as this host."""


@token.command("create")
@click.option("--ttl", default=None, help="How long it lives: seconds or e.g. 30m, 12h (default and most: 768h).")
@click.option("--uses", "num_uses", default=0, type=click.IntRange(0, 2**31 - 1), help="Uses allowed (0: no limit).")
@click.option("--policy", "policies", multiple=True, help="A policy to attach (repeatable; `default` is always added).")
@click.option("--name", "display_name", default=None, help="A name shown by token lookup.")
@profile_option
@json_option
def token_create(
    ttl: str | None,
    num_uses: int,
    policies: tuple[str, ...],
    display_name: str | None,
    profile: Path | None,
    servers: tuple[str, ...],
    as_json: bool,
) -> None:
    """Make a token for this host's client; print it once (set it as VAULT_TOKEN).

    \b
    Example:
      export VAULT_TOKEN=$(strongroom token create --ttl 1h --policy app)
    """
    with open_client(profile, servers) as c:
        auth = c.vault_token(ttl=ttl, num_uses=num_uses, policies=list(policies), display_name=display_name)
    emit(auth, as_json, lambda a: click.echo(a["client_token"]))


@click.group("policy")
def policy() -> None:
    """Vault ACL policies (path + capabilities) for tokens, and deposit policies (`policy deposit`)."""


@policy.command("write")
@click.argument("name")
@click.argument("source", type=click.File("r"))
@admin_options
@json_option
def policy_write(
    name: str, source: TextIO, data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool
) -> None:
    """Create or replace a policy from a file in HCL or JSON (`-` reads standard input).

    \b
    Example:
      strongroom policy write app app.hcl --data /var/lib/strongroom
    """
    text = source.read()
    with open_client(profile, servers, data_dir, admin=True) as c:
        c.write_acl_policy(name, text)
    emit({"name": name, "written": True}, as_json, lambda o: click.echo(f"policy {name}: written"))


@policy.command("read")
@click.argument("name")
@admin_options
@json_option
def policy_read(name: str, data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Print a policy's text.

    \b
    Example:
      strongroom policy read app --data /var/lib/strongroom
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        text = c.read_acl_policy(name)
    emit({"name": name, "policy": text}, as_json, lambda o: click.echo(text.rstrip("\n")))


@policy.command("list")
@admin_options
@json_option
def policy_list(data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """List the policies (root and default are built in).

    \b
    Example:
      strongroom policy list --data /var/lib/strongroom --json
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        names = c.list_acl_policies()
    emit(names, as_json, lambda rows: click.echo("\n".join(rows)))


@policy.command("delete")
@click.argument("name")
@admin_options
@json_option
def policy_delete(name: str, data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Delete a policy; tokens that name it lose what it allowed at their next request.

    \b
    Example:
      strongroom policy delete app --data /var/lib/strongroom
    """
    if name in ("root", "default"):
        raise CliError(f"{name} is built in and cannot be deleted")
    with open_client(profile, servers, data_dir, admin=True) as c:
        c.delete_acl_policy(name)
    emit({"name": name, "deleted": True}, as_json, lambda o: click.echo(f"policy {name}: deleted"))


@policy.command("deposit")
@click.argument("name")
@policy_options
@profile_option
@json_option
def policy_deposit(
    name: str,
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
    """Replace the policy of a deposit of yours (no options: owner only, no limits).

    \b
    Example:
      strongroom policy deposit db-key --reader group:dbhosts --expires 7d
      strongroom policy deposit vol-key --approver group:trustees --approvals-required 2
    """
    with open_client(profile, servers) as c:
        policy = _policy(readers, expires, not_before, max_retrievals, approvers, approvals_required, approval_window)
        out = c.set_policy(name, **policy)
    emit(out, as_json, lambda o: click.echo(f"{name}: readers {' '.join(o['policy']['readers']) or '(owner only)'}"))
