"""Each compiled entry point checks the sizes and state it is given itself and refuses, touching
nothing, what would make it read or write past a buffer (tests/test_native_sanitized.py runs this
under AddressSanitizer)."""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np
import pytest

from strongroom.fs import native as fs_native
from strongroom.rng import native as rng_native

pytestmark = pytest.mark.unit  # the fast tier: no root, FUSE, PostgreSQL or server process

KEY, FILE_ID = os.urandom(32), os.urandom(16)


def _addr(buf: bytearray | bytes) -> int:
    return rng_native.address(buf)


def test_block_entry_points_refuse_short_buffers() -> None:
    so = fs_native.lib()
    assert so is not None
    plain = bytearray(os.urandom(5000))  # two blocks
    nonces = os.urandom(24)
    out = bytearray(5000 + 2 * 28)
    bad = ctypes.c_uint64(0)
    ok = so.sr_seal_blocks(KEY, 32, FILE_ID, 16, 0, _addr(plain), len(plain), nonces, 24, _addr(out), len(out))
    assert ok == len(out)
    wrong = ((31, 16, 24, len(out)), (32, 15, 24, len(out)), (32, 16, 12, len(out)), (32, 16, 24, len(out) - 1))
    for key_len, id_len, nonce_len, out_len in wrong:
        n = so.sr_seal_blocks(KEY, key_len, FILE_ID, id_len, 0, _addr(plain), len(plain), nonces, nonce_len, _addr(out), out_len)
        assert n == fs_native.BAD_LENGTH, (key_len, id_len, nonce_len, out_len)
    back = bytearray(5000)
    assert so.sr_open_blocks(KEY, 32, FILE_ID, 16, 0, _addr(out), len(out), _addr(back), len(back), ctypes.byref(bad), 0) == 5000
    assert back == plain
    short = so.sr_open_blocks(KEY, 32, FILE_ID, 16, 0, _addr(out), len(out), _addr(back), 4999, ctypes.byref(bad), 0)
    assert short == fs_native.BAD_LENGTH
    scratch = bytearray(fs_native.CHUNK)
    fd = os.open("/dev/zero", os.O_RDONLY)
    try:
        nread = ctypes.c_uint64(0)
        sealed = bytearray(8192 + 56)
        args = (fd, 0, 8192, KEY, 32, FILE_ID, 16, 0, nonces, 24, _addr(scratch))
        assert so.sr_pread_seal(*args, len(scratch), _addr(sealed), len(sealed), ctypes.byref(nread)) == len(sealed)
        assert nread.value == 8192
        assert so.sr_pread_seal(*args, len(scratch) - 1, _addr(sealed), len(sealed), ctypes.byref(nread)) == fs_native.BAD_LENGTH
        assert so.sr_pread_seal(*args, len(scratch), _addr(sealed), len(sealed) - 1, ctypes.byref(nread)) == fs_native.BAD_LENGTH
        assert so.sr_pread_seal(fd, 0, 8191, *args[3:], len(scratch), _addr(sealed), len(sealed), ctypes.byref(nread)) == -3
    finally:
        os.close(fd)


def test_rng_entry_points_refuse_short_buffers_and_bad_state() -> None:
    so = rng_native.lib()
    assert so is not None
    data = os.urandom(2500 * 3)
    flags = np.zeros(3, dtype=np.uint8)
    last_bit, last32 = ctypes.c_int(0), ctypes.c_uint32(0)
    args = (ctypes.byref(last_bit), ctypes.byref(last32), 0)
    assert so.sr_fips_blocks(_addr(data), len(data), 3, *args, rng_native.address(flags), 3) == 0
    assert so.sr_fips_blocks(_addr(data), len(data) - 1, 3, *args, rng_native.address(flags), 3) == rng_native.BAD_STATE
    assert so.sr_fips_blocks(_addr(data), len(data), 3, *args, rng_native.address(flags), 2) == rng_native.BAD_STATE
    ent = rng_native.EntState()
    ent.npart = 6  # no call leaves this: part[] would be written past its end
    assert so.sr_ent_update(ctypes.byref(ent), _addr(data), len(data)) == rng_native.BAD_STATE
    health = rng_native.HealthState()  # a window of 0 would never advance
    assert so.sr_health_update(ctypes.byref(health), _addr(data), len(data)) == rng_native.BAD_STATE


@pytest.mark.parametrize(("module", "other"), [(fs_native, rng_native), (rng_native, fs_native)])
def test_a_build_of_another_kind_or_version_is_ignored(module: Any, other: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A library without the expected ABI number (here: the other helper) is not loaded: the
    Python paths serve instead of a call with the wrong signature."""
    monkeypatch.setattr(module, "LIBRARY", other.LIBRARY)
    module.lib.cache_clear()
    try:
        assert module.lib() is None
    finally:
        monkeypatch.undo()
        module.lib.cache_clear()
    assert module.lib() is not None
