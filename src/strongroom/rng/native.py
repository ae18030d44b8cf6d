"""The compiled helpers of strongroom.rng: libsrrng.so, built by the package build
(setup.py) from the C files beside this module (FIPS blocks, ent's sums, SP 800-90B tests, RDRAND/RDSEED).

Everything here has a numpy (or "not available") fallback, so a missing build costs speed, not
function; `available()` says which applies.  ctypes releases the GIL during every call.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

from strongroom import helpers

LIBRARY = Path(__file__).with_name("libsrrng.so")


class EntState(ctypes.Structure):
    _fields_ = [
        ("counts", ctypes.c_uint64 * 256),
        ("serial", ctypes.c_uint64),
        ("inside", ctypes.c_uint64),
        ("groups", ctypes.c_uint64),
        ("first", ctypes.c_uint32),
        ("last", ctypes.c_uint32),
        ("started", ctypes.c_uint32),
        ("npart", ctypes.c_uint32),
        ("part", ctypes.c_uint8 * 8),
    ]


class HealthState(ctypes.Structure):
    _fields_ = [
        ("rct_limit", ctypes.c_uint32),
        ("apt_limit", ctypes.c_uint32),
        ("apt_window", ctypes.c_uint32),
        ("run", ctypes.c_uint32),
        ("last", ctypes.c_uint32),
        ("apt_seen", ctypes.c_uint32),
        ("apt_first", ctypes.c_uint32),
        ("apt_count", ctypes.c_uint32),
        ("rct_failures", ctypes.c_uint64),
        ("apt_failures", ctypes.c_uint64),
    ]


ABI = 2  # sr_rng_abi_version() in fipsblocks.c
BAD_STATE = -3  # what an entry point answers for sizes or a state it refuses


@functools.lru_cache(maxsize=1)
def lib() -> ctypes.CDLL | None:
    """The helper, or None (the numpy paths serve): not built, unloadable here, or built by
    another version."""
    so = helpers.load(LIBRARY, ("sr_rng_abi_version", ABI))
    if so is None:
        return None
    vp, size = ctypes.c_void_p, ctypes.c_size_t
    so.sr_fips_blocks.restype = ctypes.c_int
    so.sr_fips_blocks.argtypes = [
        vp,
        size,
        size,
        ctypes.POINTER(ctypes.c_int),
        ctypes.POINTER(ctypes.c_uint32),
        ctypes.c_int,
        vp,
        size,
    ]
    so.sr_ent_update.restype = ctypes.c_int
    so.sr_ent_update.argtypes = [ctypes.POINTER(EntState), vp, size]
    so.sr_health_update.restype = ctypes.c_int
    so.sr_health_update.argtypes = [ctypes.POINTER(HealthState), vp, size]
    for name in ("sr_cpu_has_rdrand", "sr_cpu_has_rdseed"):
        getattr(so, name).restype = ctypes.c_int
        getattr(so, name).argtypes = []
    for name in ("sr_rdrand_fill", "sr_rdseed_fill"):
        getattr(so, name).restype = size
        getattr(so, name).argtypes = [vp, size]
    return so


def require() -> ctypes.CDLL:
    so = lib()
    if so is None:
        raise RuntimeError(f"{LIBRARY.name} is not built: run scripts/install.sh")
    return so


def address(data: bytes | bytearray | memoryview | np.ndarray) -> int:
    """The address of a buffer's first byte, without copying it."""
    arr = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    return int(arr.ctypes.data)
