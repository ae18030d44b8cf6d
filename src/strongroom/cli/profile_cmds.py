"""`strongroom profile protect|show`, and the key-store options of `strongroom register`: where a
host keeps its private key (a file, a file under a passphrase, a PKCS#11 token)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from strongroom.cli.common import CliError, Group, ask_key_passphrase, emit, json_option, profile_option, read_passphrase

F = TypeVar("F", bound=Callable[..., Any])


def key_store_options(f: F) -> F:
    options = [
        click.option("--key-passphrase", is_flag=True, help="Keep the private key encrypted under a passphrase."),
        click.option(
            "--key-passphrase-file", type=click.Path(dir_okay=False, path_type=Path), help="That passphrase (else a prompt)."
        ),
        click.option("--pkcs11-lib", help="Keep the private key in a token of this PKCS#11 module (made there)."),
        click.option("--pkcs11-token", help="The token's label."),
        click.option("--pkcs11-pin-file", type=click.Path(dir_okay=False, path_type=Path), help="The token's user PIN file."),
        click.option("--pkcs11-label", default="strongroom-host", show_default=True, help="The key's label in the token."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def key_store_from(kw: dict[str, Any]) -> Any:
    """A KeyStore from key_store_options' values (popped from ``kw``)."""
    from strongroom.client.keystore import TokenKey
    from strongroom.client.profile import KeyStore

    use_pass, pass_file = kw.pop("key_passphrase"), kw.pop("key_passphrase_file")
    lib, token, pin_file, label = (kw.pop(k) for k in ("pkcs11_lib", "pkcs11_token", "pkcs11_pin_file", "pkcs11_label"))
    if (use_pass or pass_file) and (lib or token or pin_file):
        raise CliError("keep the key under a passphrase or in a token, not both")
    if lib or token or pin_file:
        if not (lib and token and pin_file):
            raise CliError("a token needs --pkcs11-lib, --pkcs11-token and --pkcs11-pin-file")
        return KeyStore(token=TokenKey(str(Path(lib).resolve()), token, str(Path(pin_file).resolve()), label))
    if use_pass or pass_file:
        return KeyStore(passphrase=read_passphrase(pass_file, confirm=True, what="New key passphrase"))
    return KeyStore()


@click.group("profile", cls=Group)
def profile_group() -> None:
    """This host's client profile: where its private key is kept."""


@profile_group.command("protect")
@profile_option
@key_store_options
@json_option
def profile_protect(profile: Path | None, as_json: bool, **kw: Any) -> None:
    """Move this profile's private key into a PKCS#11 token (not extractable from then on; the
    key file is overwritten and removed) or encrypt it under a passphrase, so that a copy of the
    disk alone cannot act as this host.

    \b
    Examples:
      strongroom profile protect --key-passphrase
      strongroom profile protect --pkcs11-lib /usr/lib/softhsm/libsofthsm2.so --pkcs11-token host \\
          --pkcs11-pin-file /etc/strongroom/pin
    """
    from strongroom.client.keystore import KeyStoreError, TokenIdentity
    from strongroom.client.profile import Profile, default_path
    from strongroom.crypto.identity import Identity

    kw.pop("servers", None)  # profile_option's, unused here
    store = key_store_from(kw)
    p = Profile.load(profile if profile is not None else default_path(), ask_key_passphrase)
    if store.token is None and store.passphrase is None:
        raise CliError("say where to keep the key: --key-passphrase or --pkcs11-lib/--pkcs11-token/--pkcs11-pin-file")
    if not isinstance(p.identity, Identity):
        raise CliError("this profile's key is in a token already: it cannot be moved out")
    try:
        if store.token is not None:
            p.identity = TokenIdentity.import_key(store.token, p.identity)
    except KeyStoreError as e:
        raise CliError(str(e)) from None
    p.key_store = store
    p.save(None)
    where = f"PKCS#11 token {store.token.token!r}" if store.token else "identity.key, encrypted"
    emit({"profile": str(p.path), "key": where}, as_json, lambda o: click.echo(f"the key of {o['profile']} is now in {o['key']}"))
