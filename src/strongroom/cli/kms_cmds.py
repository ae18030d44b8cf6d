"""`strongroom kms-plugin`: the Kubernetes KMS v2 plugin (client/kmsplugin.py)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import click

from strongroom.cli.common import CliError, open_client, profile_option


@click.command("kms-plugin")
@click.option("--socket", "socket_path", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The unix socket.")
@click.option("--key", default="kubernetes", show_default=True, help="The transit key (this host's) that wraps the DEKs.")
@profile_option
def kms_plugin(socket_path: Path, key: str, profile: Path | None, servers: tuple[str, ...]) -> None:
    """Serve Kubernetes' KMS v2 API on a unix socket: the apiserver's data-encryption keys are
    wrapped by a transit key this host holds on the Strongroom server (made if absent).

    \b
    Example:
      strongroom kms-plugin --socket /var/run/kmsplugin/socket.sock --key k8s-secrets
    """
    import logging

    from strongroom.client import errors
    from strongroom.client.kmsplugin import Plugin, serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    client = open_client(profile, servers)
    try:
        info = client.transit_key(key, create=True)
    except errors.StrongroomError as e:
        raise CliError(f"the transit key {key!r}: {e}") from None
    server = serve(Plugin(client, key), socket_path)
    click.echo(f"kms-plugin on {socket_path}: key {key} version {info['latest_version']}", err=True)
    stop: Any = lambda *_: server.stop(5)  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.wait_for_termination()
    client.close()
