"""How a command gets the unseal material: a passphrase, shares (files or prompts), or the data
dir's HSM, by how the server is sealed; and how new shares are shown."""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from strongroom.cli.common import CliError, read_passphrase, read_text_file, require_data

F = TypeVar("F", bound=Callable[..., Any])
SHARE_FILE_MAX = 64 << 10


def unlock_options(f: F) -> F:
    f = click.option(
        "--share-file",
        "share_files",
        multiple=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="Unseal shares, one per line (repeatable), for a server sealed with shares or an HSM's recovery shares.",
    )(f)
    return click.option(
        "--passphrase-file",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Read the passphrase from this file (else STRONGROOM_PASSPHRASE, else a prompt).",
    )(f)


def read_shares(paths: tuple[Path, ...]) -> list[str]:
    """Each non-empty line of each file that is not a # comment is one share."""
    out = []
    for path in paths:
        text = read_text_file(path, SHARE_FILE_MAX, "share file")
        out += [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not out:
        raise CliError("no shares in the share files given")
    return out


def _prompt_shares(count: int) -> list[str]:
    return [getpass.getpass(f"Share {i + 1} of {count}: ") for i in range(count)]


def read_unlock(data_dir: Path | None, passphrase_file: Path | None, share_files: tuple[Path, ...]) -> Any:
    """The material for a command that opens the barrier itself, by how the server is sealed."""
    from strongroom.server import barrier
    from strongroom.server.maintenance import seal_of
    from strongroom.server.sealconfig import AUTO_KINDS
    from strongroom.server.transitseal import link_for

    if share_files:
        return barrier.Unlock(shares=tuple(read_shares(share_files)))
    data = require_data(data_dir)
    try:
        config = seal_of(data)
    except ValueError as e:
        raise CliError(str(e)) from None
    if config.kind == "passphrase":
        return barrier.Unlock(passphrase=read_passphrase(passphrase_file))
    if config.kind in AUTO_KINDS:
        link = link_for(data.load_config())
        if link is None or link.kind != config.kind:
            how = config.describe()
            raise CliError(f"this server is unsealed with {how}, but config.json does not say how to reach it: give --share-file")
        return barrier.Unlock(hsm=link)
    if passphrase_file is not None or not sys.stdin.isatty():
        raise CliError(f"this server is unsealed with {config.describe()}: give them with --share-file")
    return barrier.Unlock(shares=tuple(_prompt_shares(config.threshold)))


def unlock_errors() -> tuple[type[Exception], ...]:
    from strongroom.crypto.shares import ShareError
    from strongroom.server import barrier
    from strongroom.server.hsm import HsmError

    return (barrier.WrongPassphrase, barrier.NeedsMaterial, ShareError, HsmError)


def print_shares(made: list[str], threshold: int, err: bool = False) -> None:
    click.echo(f"Unseal shares ({threshold} of {len(made)} unseal; shown once: give each to its holder):", err=err)
    for i, share in enumerate(made, 1):
        click.echo(f"  share {i}: {share}", err=err)


def check_counts(n: int, m: int) -> None:
    from strongroom.crypto.shares import ShareError
    from strongroom.crypto.shares import check_counts as check

    try:
        check(n, m)
    except ShareError as e:
        raise CliError(str(e)) from None


def holder_options(f: F) -> F:
    """The options that name an HSM or another server's transit key to hold the seal's key."""
    options = [
        click.option("--hsm-lib", help="Seal with a key in this PKCS#11 module's token (auto-unseal)."),
        click.option("--hsm-token", help="The HSM token's label."),
        click.option("--hsm-pin-file", type=click.Path(dir_okay=False, path_type=Path), help="The HSM user PIN's file (0600)."),
        click.option("--hsm-key", default="strongroom-unseal", show_default=True, help="The HSM key's label (made if absent)."),
        click.option("--transit-address", help="Seal with a transit key on this key server (https://HOST:PORT)."),
        click.option("--transit-key", help="The transit key's name on that server."),
        click.option("--transit-token-file", type=click.Path(dir_okay=False, path_type=Path), help="Its token's file (0600)."),
        click.option("--transit-mount", default="transit", show_default=True, help="The transit engine's mount."),
        click.option("--transit-ca", type=click.Path(dir_okay=False, path_type=Path), help="That server's CA certificate."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def holder_from(kw: dict[str, Any]) -> Any:
    """An HSM or transit seal from holder_options' values (popped from ``kw``), or None."""
    hsm = [kw.pop(k) for k in ("hsm_lib", "hsm_token", "hsm_pin_file", "hsm_key")]
    transit = [kw.pop(k) for k in ("transit_address", "transit_key", "transit_token_file", "transit_mount", "transit_ca")]
    if any(hsm[:3]) and any(transit[:3]):
        raise CliError("give an HSM or a transit seal, not both")
    if any(hsm[:3]):
        return hsm_settings(*hsm)
    if any(transit[:3]):
        return transit_settings(*transit)
    return None


def link_of(holder: Any) -> Any:
    from strongroom.server.hsm import Pkcs11Link, ServerHsm
    from strongroom.server.transitseal import TransitLink

    return Pkcs11Link(holder) if isinstance(holder, ServerHsm) else TransitLink(holder)


def transit_settings(address: str | None, key: str | None, token_file: Path | None, mount: str, ca: Path | None) -> Any:
    from strongroom.server.transitseal import TransitSeal

    if not (address and key and token_file):
        raise CliError("a transit seal needs --transit-address, --transit-key and --transit-token-file")
    try:
        doc = {"address": address, "key": key, "token_file": str(token_file.resolve()), "mount": mount}
        return TransitSeal.from_json({**doc, "ca_file": str(ca.resolve()) if ca else ""})
    except ValueError as e:
        raise CliError(str(e)) from None


def hsm_settings(lib: str | None, token: str | None, pin_file: Path | None, key: str) -> Any:
    from strongroom.server.hsm import HsmError, ServerHsm, check_pin_file

    if not (lib and token and pin_file):
        raise CliError("an HSM seal needs --hsm-lib, --hsm-token and --hsm-pin-file")
    try:
        check_pin_file(pin_file)
    except HsmError as e:
        raise CliError(str(e)) from None
    return ServerHsm(str(Path(lib).resolve()), token, str(pin_file.resolve()), key)
