"""`strongroom server tls renew|status`: the server certificate, renewed without a restart."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import click

from strongroom.cli.common import CliError, Group, data_option, emit, json_option, require_data
from strongroom.cli.server_cmds import server


@server.group("tls", cls=Group)
def tls_group() -> None:
    """The server's TLS certificate: renew it, see when each certificate expires."""


@tls_group.command("renew")
@data_option
@click.option("--san", "names", multiple=True, help="A DNS name or IP for the new certificate (default: the current ones).")
@click.option("--days", default=825, show_default=True, type=click.IntRange(1, 3650), help="Validity in days.")
@json_option
def tls_renew(data_dir: Path | None, names: tuple[str, ...], days: int, as_json: bool) -> None:
    """Issue a new server key and certificate from the server's CA; running servers use it for
    new connections within two seconds (or at once on SIGHUP), with no restart.

    \b
    Example:
      strongroom server tls renew --data /var/lib/strongroom
    """
    from strongroom.server import tls

    data = require_data(data_dir)
    data.load_config()
    try:
        cert = tls.renew(data.tls, list(names) or None, days)
    except (OSError, ValueError) as e:
        raise CliError(f"could not renew the certificate: {e}") from None
    out = {"not_after": cert.not_valid_after_utc.isoformat(), "serial": format(cert.serial_number, "x")}
    emit(out, as_json, lambda o: click.echo(f"new server certificate valid until {o['not_after']}; running servers pick it up"))


@tls_group.command("status")
@data_option
@json_option
def tls_status(data_dir: Path | None, as_json: bool) -> None:
    """When each certificate in the data dir's TLS dir expires.

    \b
    Example:
      strongroom server tls status --data /var/lib/strongroom
    """
    from strongroom.server.tlsreload import certificates

    data = require_data(data_dir)
    now = time.time()
    out: dict[str, Any] = {}
    for name, when in certificates(data.tls).items():
        not_after = datetime.datetime.fromtimestamp(when, datetime.UTC).isoformat()
        out[name] = {"not_after": not_after, "days_left": int((when - now) // 86400)}

    def human(o: dict[str, Any]) -> None:
        for name, v in o.items():
            click.echo(f"{name}.pem  until {v['not_after']}  ({v['days_left']} days)")

    emit(out, as_json, human)
