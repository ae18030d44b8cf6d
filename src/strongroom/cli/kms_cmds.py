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


@click.group("kmip")
def kmip() -> None:
    """KMIP client certificates (the server speaks KMIP with `server start --kmip-listen`)."""


@kmip.command("cert")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Where to write.")
@click.option("--key-type", default="ec", show_default=True, type=click.Choice(["ec", "rsa"]), help="ECDSA P-256 or RSA 3072.")
@click.option("--days", default=365, show_default=True, type=click.IntRange(1, 825), help="Validity.")
@profile_option
def kmip_cert(out_dir: Path, key_type: str, days: int, profile: Path | None, servers: tuple[str, ...]) -> None:
    """Make a key here and have the server's CA certify it for this client: writes
    client-key.pem (0600), client.pem and ca.pem for a KMIP client (MongoDB, Percona, vSphere).

    \b
    Example:
      strongroom kmip cert --out /etc/mongodb/kmip
    """
    from strongroom.client import errors, kmipcert

    client = open_client(profile, servers)
    try:
        out = kmipcert.issue(client, out_dir, key_type, days)
    except errors.StrongroomError as e:
        raise CliError(f"no certificate: {e}") from None
    except OSError as e:
        raise CliError(f"cannot write into {out_dir}: {e.strerror or e}") from None
    finally:
        client.close()
    click.echo(f"KMIP certificate for client {out['client_id']} (until {out['not_after']}) in {out_dir}")
