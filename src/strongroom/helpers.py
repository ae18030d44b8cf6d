"""Loading the compiled helpers (the libsr*.so files the package build, setup.py, puts beside
their modules).

One convention for every loader: a helper that is missing, does not load here (built for
another machine, a library it needs is gone) or reports another ABI number (left by another
version, whose signatures differ) is None, and its module's pure-Python path serves instead;
the first time, a warning says which and why.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

_log = logging.getLogger("strongroom.helpers")


def _missing(library: Path, why: str) -> None:
    _log.warning("%s %s: its Python path serves instead (slower)", library.name, why)


def load(
    library: Path, abi: tuple[str, int] | None = None, *, hold_gil: bool = False, use_errno: bool = False
) -> ctypes.CDLL | None:
    """``library`` loaded, or None.  ``abi``: (the helper's ABI-number function, the number this
    version was written for).  ``hold_gil``: calls keep the GIL (PyDLL), for entry points that
    take nanoseconds, where releasing and retaking the GIL would cost more than the call."""
    if not library.exists():
        _missing(library, "was not built (pip install . builds it)")
        return None
    kind = ctypes.PyDLL if hold_gil else ctypes.CDLL
    try:
        so = kind(str(library), use_errno=use_errno)
    except OSError as e:
        _missing(library, f"does not load here ({e})")
        return None
    if abi is not None:
        name, expected = abi
        fn = getattr(so, name, None)
        got = None
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_int, []
            got = int(fn())
        if got != expected:
            _missing(library, f"is from another version (ABI {got}, this one needs {expected}; rebuild with pip install .)")
            return None
    return so
