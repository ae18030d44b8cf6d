"""`strongroom server tang rotate|show`, and the options `fs init` binds a volume to Tang
servers with."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from strongroom.cli.common import CliError, Group, admin_options, emit, json_option, open_client
from strongroom.cli.server_cmds import server

F = TypeVar("F", bound=Callable[..., Any])


def tang_options(f: F) -> F:
    options = [
        click.option("--tang", "tang_urls", multiple=True, metavar="URL", help="Bind the volume to a Tang server (repeatable)."),
        click.option("--tang-threshold", type=click.IntRange(1, 16), default=1, show_default=True, help="How many must answer."),
        click.option("--tang-thumbprint", multiple=True, help="A Tang signing key's thumbprint to trust (repeatable)."),
        click.option("--tang-trust", is_flag=True, help="Trust the Tang servers' advertised keys as first seen."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def tang_binding(kw: dict[str, Any]) -> Any:
    """A TangBinding from tang_options' values (popped from ``kw``), or None."""
    from strongroom.fs.volume import TangBinding

    urls, threshold = list(kw.pop("tang_urls")), kw.pop("tang_threshold")
    thumbprints, trust = list(kw.pop("tang_thumbprint")), kw.pop("tang_trust")
    if not urls:
        if thumbprints or trust or threshold != 1:
            raise CliError("--tang-threshold, --tang-thumbprint and --tang-trust go with --tang URL")
        return None
    return TangBinding(urls, threshold, thumbprints or None, trust)


@server.group("tang", cls=Group)
def tang_group() -> None:
    """The server's Tang keys (clevis and `fs init --tang` bind volumes to URL/tang)."""


@tang_group.command("rotate")
@admin_options
@json_option
def tang_rotate(data_dir: Path | None, profile: Path | None, servers: tuple[str, ...], as_json: bool) -> None:
    """Make new Tang keys and advertise them; bindings made with the old keys still recover.

    \b
    Example:
      strongroom server tang rotate --data /var/lib/strongroom
    """
    with open_client(profile, servers, data_dir, admin=True) as c:
        out = dict(c._json("POST", "/v1/admin/tang/rotate"))
    emit(out, as_json, lambda o: click.echo(f"Tang keys generation {o['generation']}; signing key {o['sign_kid']}"))
