"""`strongroom server systemd-units`: the systemd units, rendered for this installation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import click

from strongroom.cli.common import CliError, emit, json_option
from strongroom.cli.server_cmds import server

UNITS = ("strongroom.service", "strongroom-mount@.service")


def bindir() -> Path:
    """Where this installation's ``strongroom`` and ``mount.strongroom`` commands are."""
    return Path(sys.executable).parent


def render(name: str, bin_dir: Path) -> str:
    return resources.files("strongroom").joinpath("units", name).read_text().replace("@BINDIR@", str(bin_dir))


@server.command("systemd-units")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Write the units into this directory.")
@click.option(
    "--install",
    is_flag=True,
    help="Install: units in /etc/systemd/system, the user in /etc/sysusers.d (made now), /usr/sbin/mount.strongroom.",
)
@json_option
def systemd_units(out: Path | None, install: bool, as_json: bool) -> None:
    """The server's unit (Type=notify, hardened, its own user) and the volume mount template
    strongroom-mount@.service, with this installation's command paths; and the fstab helper.

    \b
    Examples:
      strongroom server systemd-units --out ./units
      strongroom server systemd-units --install && systemctl enable --now strongroom
    """
    if (out is None) == (not install):
        raise CliError("give --out DIR or --install")
    target = Path("/etc/systemd/system") if install else out
    assert target is not None
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name in UNITS:
        path = target / name
        path.write_text(render(name, bindir()))
        written.append(str(path))
    sysusers = resources.files("strongroom").joinpath("units", "strongroom.sysusers").read_text()
    if install:
        users = Path("/etc/sysusers.d/strongroom.conf")
        users.parent.mkdir(parents=True, exist_ok=True)
        users.write_text(sysusers)
        written.append(str(users))
        if shutil.which("systemd-sysusers"):
            subprocess.run(["systemd-sysusers", str(users)], check=False)
        helper = Path("/usr/sbin/mount.strongroom")
        helper.unlink(missing_ok=True)
        helper.symlink_to(bindir() / "mount.strongroom")
        written.append(str(helper))
        if os.path.isdir("/run/systemd/system"):  # systemd is running: let it see the units
            subprocess.run(["systemctl", "daemon-reload"], check=False)
    else:
        (target / "strongroom.sysusers").write_text(sysusers)
        written.append(str(target / "strongroom.sysusers"))
    emit({"written": written}, as_json, lambda o: click.echo("\n".join(o["written"])))
