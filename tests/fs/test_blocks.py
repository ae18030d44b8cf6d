"""The compiled block loop (fs/native.py) against the pyca/cryptography loop: same format both
ways, same damage reports, sizes checked before C touches memory; and the threaded standalone
pipeline against one thread, for sizes around every piece boundary."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strongroom.fs import content, native, standalone

pytestmark = pytest.mark.unit  # the fast tier: no root, FUSE, PostgreSQL or server process


def test_the_compiled_loop_is_built() -> None:
    assert native.available(), "the package build (setup.py) builds libsrblocks.so"


def _pair() -> tuple[content.FileCipher, content.FileCipher]:
    h = content.FileHeader.fresh()
    return content.FileCipher(h), content.FileCipher(h, compiled=False)


@settings(max_examples=40, deadline=None)
@given(size=st.integers(0, 5 * content.BLOCK + 7), first=st.integers(0, content.MAX_BLOCKS_PER_KEY - 6))
def test_compiled_and_python_loops_read_each_other(size: int, first: int) -> None:
    fast, slow = _pair()
    plain = os.urandom(size)
    for sealer, opener in ((fast, slow), (slow, fast)):
        sealed = sealer.seal(first, plain)
        assert len(sealed) == content.sealed_size(size)
        assert opener.open(first, sealed) == plain
        out = memoryview(bytearray(size))
        assert opener.open_into(first, memoryview(sealed), out) == size and bytes(out) == plain


def test_both_loops_refuse_blocks_past_the_per_key_limit() -> None:
    for c in _pair():
        with pytest.raises(content.DamagedFile, match="reencrypt"):
            c.seal(content.MAX_BLOCKS_PER_KEY - 1, os.urandom(2 * content.BLOCK))


def test_compiled_loop_names_the_damaged_block() -> None:
    fast, slow = _pair()
    sealed = bytearray(fast.seal(10, os.urandom(3 * content.BLOCK + 100)))
    sealed[content.CBLOCK * 2 + 40] ^= 1
    for c in (fast, slow):
        with pytest.raises(content.DamagedFile) as e:
            c.open(10, bytes(sealed))
        assert e.value.block == 12 and "does not authenticate" in str(e.value)
    # moved to another position: the AAD's block number no longer matches
    good = fast.seal(10, os.urandom(content.BLOCK))
    with pytest.raises(content.DamagedFile) as e:
        fast.open(11, good)
    assert e.value.block == 11


def test_compiled_loop_reports_a_truncated_tail() -> None:
    fast, slow = _pair()
    sealed = fast.seal(0, os.urandom(content.BLOCK + 50))
    cut = sealed[: content.CBLOCK + content.OVERHEAD]  # the last block lost all its plaintext
    for c in (fast, slow):
        with pytest.raises(content.DamagedFile, match="block 1 is truncated"):
            c.open(0, cut)


def test_sizes_are_checked_before_the_c_loop_runs() -> None:
    fast, _ = _pair()
    plain = memoryview(os.urandom(2 * content.BLOCK))
    with pytest.raises(ValueError):
        fast.seal_into(0, plain, memoryview(bytearray(2 * content.BLOCK)))  # no room for nonces and tags
    with pytest.raises(ValueError):
        fast.seal_into(0, plain, memoryview(bytes(content.sealed_size(len(plain)))))  # read-only output
    sealed = memoryview(fast.seal(0, plain))
    with pytest.raises(ValueError):
        fast.open_into(0, sealed, memoryview(bytearray(content.BLOCK)))


@pytest.mark.parametrize(
    "size",
    [0, 1, content.BLOCK, standalone.PIECE - 1, standalone.PIECE, standalone.PIECE + 1, 3 * standalone.PIECE + 4097],
)
def test_threaded_pipeline_round_trips_at_every_piece_boundary(size: int) -> None:
    plain = os.urandom(size)
    volume_id, kek = os.urandom(16), os.urandom(32)
    outputs = []
    for threads in (1, 2, 3):
        enc = io.BytesIO()
        assert standalone.encrypt_stream(io.BytesIO(plain), enc, volume_id, kek, None, threads) == size
        outputs.append(enc.getvalue())
        for dthreads in (1, 2):
            back = io.BytesIO()
            standalone.decrypt_stream(io.BytesIO(enc.getvalue()), back, lambda _env: [kek], dthreads)
            assert back.getvalue() == plain
    assert len({len(o) for o in outputs}) == 1  # same layout whatever the thread count
    # every cut of the last piece is caught, whichever pipeline reads it
    data = outputs[-1]
    for cut in (1, content.END_MARKER, content.END_MARKER + 1, content.CBLOCK):
        if cut <= len(data) - 300:
            with pytest.raises(content.DamagedFile):
                standalone.decrypt_stream(io.BytesIO(data[:-cut]), io.BytesIO(), lambda _env: [kek], 2)


def test_damage_in_a_middle_piece_fails_the_threaded_decrypt() -> None:
    plain = os.urandom(3 * standalone.PIECE)
    volume_id, kek = os.urandom(16), os.urandom(32)
    enc = io.BytesIO()
    standalone.encrypt_stream(io.BytesIO(plain), enc, volume_id, kek, None, 2)
    data = bytearray(enc.getvalue())
    data[len(data) // 2] ^= 0x80
    with pytest.raises(content.DamagedFile):
        standalone.decrypt_stream(io.BytesIO(bytes(data)), io.BytesIO(), lambda _env: [kek], 2)


@pytest.mark.parametrize(
    "size", [0, 5, native.CHUNK + 1, standalone.FILE_JOB, standalone.FILE_JOB + 1, 2 * standalone.FILE_JOB + 4097]
)
def test_file_input_pipeline_matches_the_stream_pipeline(tmp_path: Path, size: int) -> None:
    """A regular file is read by the sealing threads themselves (pread), from the file's current
    position; the result must decrypt exactly like the stream path's."""
    plain = os.urandom(size)
    src = tmp_path / "plain"
    src.write_bytes(b"skipped prefix" + plain)
    volume_id, kek = os.urandom(16), os.urandom(32)
    for threads in (1, 2, 3):
        enc = io.BytesIO()
        with open(src, "rb") as f:
            f.read(len(b"skipped prefix"))
            assert standalone.encrypt_stream(f, enc, volume_id, kek, None, threads) == size
        back = io.BytesIO()
        standalone.decrypt_stream(io.BytesIO(enc.getvalue()), back, lambda _env: [kek], 2)
        assert back.getvalue() == plain


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("size", [0, 1, native.CHUNK - 1, native.CHUNK, 3 * native.CHUNK + 5])
def test_seal_from_fd_reads_and_seals_a_range(tmp_path: Path, compiled: bool, size: int) -> None:
    """Both the compiled read-and-seal loop and its Python stand-in: what a pread of the range
    returns, sealed as consecutive blocks, stopping at the end of the file."""
    src = tmp_path / "plain"
    plain = os.urandom(size)
    src.write_bytes(os.urandom(3 * content.BLOCK) + plain)
    cipher = content.FileCipher(content.FileHeader.fresh(), compiled=compiled)
    if compiled:
        assert cipher._native is not None
    length = 4 * native.CHUNK
    scratch = memoryview(bytearray(native.CHUNK))
    out = memoryview(bytearray(content.sealed_size(length)))
    fd = os.open(src, os.O_RDONLY)
    try:
        nread, sealed = cipher.seal_from_fd(fd, 3 * content.BLOCK, 7, length, scratch, out)
    finally:
        os.close(fd)
    assert nread == size and sealed == content.sealed_size(size)
    assert cipher.open(7, bytes(out[:sealed])) == plain
    with pytest.raises(OSError):
        cipher.seal_from_fd(-1, 0, 0, length, scratch, out)  # a read error is an error, not an end
