"""A PKCS#11 token's session (python-pkcs11): the module loaded once per process, a token found
by its label (the module re-initialized once if it is not there: a token made or plugged in since),
and the user PIN read from a file.  Errors name the token, never the PIN."""

from __future__ import annotations

import os
import threading
from typing import Any

from strongroom.durable import read_regular

PIN_MAX = 256


class TokenError(Exception):
    pass


def _read_pin(path: str) -> str:
    try:
        raw = read_regular(path, PIN_MAX)
    except OSError as e:
        raise TokenError(f"HSM PIN file {path}: {e.strerror}") from None
    except ValueError as e:
        raise TokenError(f"HSM PIN file {path}: {e}") from None
    pin = raw.decode("utf-8", "replace").rstrip("\r\n")
    if not pin:
        raise TokenError(f"HSM PIN file {path} is empty")
    return pin


_libs: dict[str, Any] = {}
_libs_lock = threading.Lock()


def _library(path: str) -> Any:
    """One loaded module per path and process (PKCS#11 is initialized once per process)."""
    import pkcs11

    with _libs_lock:
        lib = _libs.get(path)
        if lib is None:
            if not os.path.isfile(path):
                raise TokenError(f"HSM library {path} does not exist")
            lib = _libs[path] = pkcs11.lib(path)
        return lib


def open_session(lib_path: str, label: str, pin_file: str) -> Any:
    """A read-write session logged in as the user."""
    import pkcs11.exceptions as px

    try:
        lib = _library(lib_path)
        try:
            tok = lib.get_token(token_label=label)
        except px.NoSuchToken:
            lib.reinitialize()
            tok = lib.get_token(token_label=label)
        return tok.open(user_pin=_read_pin(pin_file), rw=True)
    except px.NoSuchToken:
        raise TokenError(f"HSM token {label!r} not found") from None
    except (px.PinIncorrect, px.PinInvalid, px.PinLenRange):
        raise TokenError(f"HSM token {label!r} refused the PIN") from None
    except px.PinLocked:
        raise TokenError(f"HSM token {label!r} is locked (too many wrong PINs)") from None
    except px.PKCS11Error as e:
        raise TokenError(f"HSM token {label!r}: {type(e).__name__}") from None
    except (OSError, RuntimeError) as e:
        raise TokenError(f"HSM library {lib_path}: {type(e).__name__}") from None
