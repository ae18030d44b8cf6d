"""Entry point of the `strongroom` command."""

from __future__ import annotations

import click

from strongroom import __version__
from strongroom.cli import (
    acl_cmds,
    bench_cmds,
    client_cmds,
    fs_cmds,
    kms_cmds,
    org_cmds,
    profile_cmds,
    rng_cmds,
    server_cmds,
    vault_cmds,
)
from strongroom.cli import fs_rewrite_cmds as _fs_rewrite  # noqa: F401 - registers its commands in the fs group
from strongroom.cli import seal_cmds as _seal  # noqa: F401 - registers its commands in the server group
from strongroom.cli import systemd_cmds as _systemd  # noqa: F401 - registers its commands in the server group
from strongroom.cli import tang_cmds as _tang  # noqa: F401 - registers its commands in the server group
from strongroom.cli import tls_cmds as _tls  # noqa: F401 - registers its commands in the server group
from strongroom.cli.common import Group


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="strongroom")
def cli() -> None:
    """Strongroom: a key trustee server, transparent encryption and entropy tools.

    \b
    Example, end to end on one host:
      strongroom server init --data /var/lib/strongroom --passphrase-file pw
      strongroom server start --data /var/lib/strongroom --passphrase-file pw &
      strongroom register --server https://127.0.0.1:8443 --ca /var/lib/strongroom/tls/ca.pem \\
          --org default --auth-secret "$SECRET"
      echo -n s3cret | strongroom put db-password -
      strongroom get db-password
    """


for group in (
    server_cmds.server,
    org_cmds.org,
    org_cmds.client_group,
    org_cmds.group_group,
    rng_cmds.rng,
    fs_cmds.fs,
    acl_cmds.acl,
    vault_cmds.token,
    vault_cmds.policy,
    bench_cmds.bench,
    profile_cmds.profile_group,
):
    cli.add_command(group)
for cmd in client_cmds.COMMANDS:
    cli.add_command(cmd)
cli.add_command(kms_cmds.kms_plugin)
cli.add_command(kms_cmds.kmip)


def main() -> None:
    cli(prog_name="strongroom")


if __name__ == "__main__":
    main()
