"""Loading the compiled helpers (the .so files scripts/install.sh builds beside their modules).

One convention for every loader: a helper that is missing, does not load here (built for
another machine, a library it needs is gone) or reports another ABI number (left by another
version, whose signatures differ) is None, and its module's pure-Python path serves instead.
"""

from __future__ import annotations

import ctypes
from pathlib import Path


def load(
    library: Path, abi: tuple[str, int] | None = None, *, hold_gil: bool = False, use_errno: bool = False
) -> ctypes.CDLL | None:
    """``library`` loaded, or None.  ``abi``: (the helper's ABI-number function, the number this
    version was written for).  ``hold_gil``: calls keep the GIL (PyDLL), for entry points that
    take nanoseconds, where releasing and retaking the GIL would cost more than the call."""
    if not library.exists():
        return None
    kind = ctypes.PyDLL if hold_gil else ctypes.CDLL
    try:
        so = kind(str(library), use_errno=use_errno)
    except OSError:
        return None
    if abi is not None:
        name, expected = abi
        try:
            fn = getattr(so, name)
        except AttributeError:
            return None
        fn.restype, fn.argtypes = ctypes.c_int, []
        if int(fn()) != expected:
            return None
    return so
