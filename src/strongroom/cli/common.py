"""Conventions shared by every command: errors, --json, passphrases, profiles, data dirs."""

from __future__ import annotations

import getpass
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console

from strongroom.client.errors import StrongroomError
from strongroom.client.profile import default_path
from strongroom.server.datadir import DataDir, DataDirError
from strongroom.server.errors import SchemaTooNew, StorageUnavailable

if TYPE_CHECKING:
    from strongroom.client import Client

F = TypeVar("F", bound=Callable[..., Any])


class CliError(Exception):
    """A failure to report as one line on stderr with a non-zero exit."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class Group(click.Group):
    """Turns expected failures into one readable line and a non-zero exit, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except CliError as e:
            _fail(str(e), e.code)
        except (StrongroomError, DataDirError) as e:
            _fail(f"{type(e).__name__}: {e}" if type(e).__name__ not in ("StrongroomError", "DataDirError") else str(e))
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except OSError as e:
            _fail(f"{e.strerror or type(e).__name__}: {e.filename or ''}".rstrip(": "))
        except StorageUnavailable as e:
            _fail(f"database unavailable: {e}")
        except SchemaTooNew as e:
            _fail(str(e))
        except ValueError as e:
            _fail(str(e))
        except Exception as e:  # noqa: BLE001 - the promise is one line, never a traceback
            if os.environ.get("STRONGROOM_DEBUG"):
                raise
            _fail(f"unexpected {type(e).__name__} (set STRONGROOM_DEBUG=1 for details)")


def _fail(message: str, code: int = 1) -> None:
    click.echo(f"strongroom: error: {message}", err=True)
    sys.exit(code)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")(f)


def emit(data: Any, as_json: bool, human: Callable[[Any], None] | None = None) -> None:
    if as_json or human is None:
        click.echo(json.dumps(data, indent=None if as_json else 2, sort_keys=True, default=str))
    else:
        human(data)


def passphrase_option(f: F) -> F:
    return click.option(
        "--passphrase-file",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Read the passphrase from this file (else STRONGROOM_PASSPHRASE, else a prompt).",
    )(f)


PASSPHRASE_FILE_MAX = 64 << 10
UTF8_BOM = b"\xef\xbb\xbf"


def read_text_file(path: Path, limit: int, what: str) -> str:
    """A small UTF-8 file (a FIFO is fine: `--passphrase-file <(pass show vol)`), its leading
    byte-order mark dropped (some editors write one; no one types it); one readable error for a
    file that cannot be read, is over ``limit`` bytes or is not UTF-8."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise CliError(f"{path}: {e.strerror}") from None
    if len(raw) > limit:
        raise CliError(f"{path} is over {limit >> 10} KiB: not a {what}")
    try:
        return raw.removeprefix(UTF8_BOM).decode("utf-8")
    except UnicodeDecodeError:
        raise CliError(f"{path} is not UTF-8 text") from None


def read_passphrase_file(path: Path) -> str:
    """FORMAT.md §4: UTF-8, a leading byte-order mark dropped, then every trailing CR and LF;
    nothing else is changed."""
    text = read_text_file(path, PASSPHRASE_FILE_MAX, "passphrase file").rstrip("\r\n")
    if not text:
        raise CliError(f"{path} is empty")
    return text


def read_passphrase(passphrase_file: Path | None, confirm: bool = False, what: str = "Passphrase") -> str:
    if passphrase_file is not None:
        return read_passphrase_file(passphrase_file)
    env = os.environ.get("STRONGROOM_PASSPHRASE")
    if env:
        return env
    if not sys.stdin.isatty():
        raise CliError("no passphrase: use --passphrase-file, STRONGROOM_PASSPHRASE, or run on a terminal")
    pw = getpass.getpass(f"{what}: ")
    if not pw:
        raise CliError("empty passphrase")
    if confirm and getpass.getpass(f"{what} again: ") != pw:
        raise CliError("the passphrases differ")
    return pw


def data_option(f: F) -> F:
    return click.option(
        "--data",
        "data_dir",
        envvar="STRONGROOM_DATA",
        type=click.Path(file_okay=False, path_type=Path),
        help="The server's data dir (or STRONGROOM_DATA).",
    )(f)


def require_data(data_dir: Path | None) -> DataDir:
    if data_dir is None:
        raise CliError("no data dir: pass --data DIR or set STRONGROOM_DATA")
    return DataDir(data_dir)


def profile_option(f: F) -> F:
    f = click.option(
        "--server",
        "servers",
        multiple=True,
        help="Use this server URL instead of the profile's (repeat for failover).",
    )(f)
    return click.option(
        "--profile",
        envvar="STRONGROOM_PROFILE",
        type=click.Path(file_okay=False, path_type=Path),
        help="Client profile dir (or STRONGROOM_PROFILE; default ~/.config/strongroom).",
    )(f)


def open_client(profile: Path | None, servers: tuple[str, ...] = (), data_dir: Path | None = None, admin: bool = False) -> Client:
    from strongroom.client.profile import Profile

    if admin and profile is None:
        if data_dir is None:
            raise CliError("no admin profile: pass --data DIR (uses DIR/admin), --profile DIR, or set STRONGROOM_DATA")
        profile = DataDir(data_dir).admin_profile
    p = Profile.load(profile if profile is not None else default_path(), ask_key_passphrase)
    from strongroom.client import Client

    return Client(list(servers) or p.servers, p.client_id, p.identity, p.ca_file)


def ask_key_passphrase() -> str:
    """For an encrypted profile key when no STRONGROOM_KEY_PASSPHRASE_FILE is set: a prompt."""
    if not sys.stdin.isatty():
        return ""
    return getpass.getpass("Key passphrase: ")


def admin_options(f: F) -> F:
    f = click.option(
        "--server",
        "servers",
        multiple=True,
        help="Use this server URL instead of the admin profile's (repeat for failover).",
    )(f)
    f = click.option(
        "--profile",
        envvar="STRONGROOM_ADMIN_PROFILE",
        type=click.Path(file_okay=False, path_type=Path),
        help="Admin profile dir (or STRONGROOM_ADMIN_PROFILE; default DATA/admin).",
    )(f)
    return data_option(f)


def console() -> Console:
    # Tables piped to a file or a pager keep their full width instead of 80 columns.
    return Console() if sys.stdout.isatty() else Console(width=200)


class progress_bar:
    """A rich progress bar on stderr for long work, when stderr is a terminal and ``total`` is at
    least ``minimum``; used as ``with progress_bar(what, total) as advance: advance(n)``."""

    def __init__(self, what: str, total: int, minimum: int = 100) -> None:
        self.what, self.total, self.minimum = what, total, minimum
        self.bar: Any = None

    def __enter__(self) -> Callable[[int], None]:
        if sys.stderr.isatty() and self.total >= self.minimum:
            from rich.progress import Progress

            self.bar = Progress(transient=True)
            self.bar.start()
            task = self.bar.add_task(self.what, total=self.total)
            return lambda k: self.bar.advance(task, k)
        return lambda k: None

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
