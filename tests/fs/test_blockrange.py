"""The write and shrink arithmetic of fs/blockrange.py, exhaustively over small sizes: each plan
is carried out on a byte model of a file (blocks read as fileio reads them, holes as zeros)
and the result must be the file a write gives on ext4, with every block but the last whole."""

from __future__ import annotations

import pytest

from strongroom.fs.blockrange import plan_write, shrink_plan

pytestmark = pytest.mark.unit

BS = 4
UNSET = 0xEE  # a byte no test writes: any left in a sealed block was never filled


def _read_block(old: bytes, block: int, into: bytearray, at: int) -> int:
    """fileio.FileIO._open_blocks for one block: the plaintext there (short at the end), its length."""
    piece = old[block * BS : min(len(old), (block + 1) * BS)]
    into[at : at + len(piece)] = piece
    return len(piece)


def _carry_out(old: bytes, offset: int, data: bytes) -> tuple[bytes, dict[int, bytes]]:
    """The plaintext after the write, and the blocks sealed (index -> plaintext)."""
    size = len(old)
    plan = plan_write(size, offset, len(data), BS)
    sealed: dict[int, bytes] = {}
    if plan.pad_block is not None:
        pad = bytearray(BS)
        _read_block(old, plan.pad_block, pad, 0)  # the rest stays zero
        sealed[plan.pad_block] = bytes(pad)
    if plan.merge:
        region = bytearray([UNSET]) * (plan.region_end - plan.first * BS)
        if plan.read_head:
            got = _read_block(old, plan.first, region, 0)
            region[got : plan.head] = bytes(max(0, plan.head - got))
        elif plan.head:
            region[: plan.head] = bytes(plan.head)
        if plan.read_tail is not None:
            _read_block(old, plan.read_tail, region, (plan.read_tail - plan.first) * BS)
        region[plan.head : plan.head + len(data)] = data
    else:
        assert offset == plan.first * BS
        region = bytearray(data)
    for i in range(0, len(region), BS):
        sealed[plan.first + i // BS] = bytes(region[i : i + BS])
    new_size = max(size, offset + len(data))
    out = bytearray()
    for block in range(-(-new_size // BS)):
        if block in sealed:
            out += sealed[block]
        else:  # untouched: the old block, or a hole
            piece = old[block * BS : (block + 1) * BS]
            out += piece + bytes(BS - len(piece)) if (block + 1) * BS <= new_size else piece
    return bytes(out[:new_size]) if len(out) >= new_size else bytes(out), sealed


@pytest.mark.parametrize("size", range(0, 14))
def test_every_small_write(size: int) -> None:
    old = bytes(range(1, size + 1))
    for offset in range(0, 15):
        for length in range(1, 11):
            data = bytes([0xA0 + length]) * length
            expected = bytearray(max(size, offset + length))
            expected[:size] = old
            expected[offset : offset + length] = data
            got, sealed = _carry_out(old, offset, data)
            case = f"size {size}, write {length} at {offset}"
            assert got == bytes(expected), case
            new_last = (len(expected) - 1) // BS
            for block, plain in sealed.items():
                assert UNSET not in plain or UNSET in expected, case
                assert block <= new_last, case
                # only the file's last block may be short; it holds exactly the file's tail
                want = len(expected) - block * BS if block == new_last else BS
                assert len(plain) == want, f"{case}: block {block} sealed with {len(plain)} bytes"
            # nothing sealed that the write does not need: the blocks it covers, and the old
            # last block when it was short and the write starts past it
            covered = set(range(offset // BS, (offset + length - 1) // BS + 1))
            padded = {(size - 1) // BS} if size % BS and offset // BS > (size - 1) // BS else set()
            assert set(sealed) == covered | padded, case


def test_bad_writes_are_refused() -> None:
    for size, offset, length in ((0, 0, 0), (4, -1, 1), (-1, 0, 1)):
        with pytest.raises(ValueError):
            plan_write(size, offset, length, BS)


@pytest.mark.parametrize("length", range(1, 14))
def test_shrink(length: int) -> None:
    last, keep = shrink_plan(length, BS)
    assert last * BS + keep == length and 1 <= keep <= BS
    with pytest.raises(ValueError):
        shrink_plan(0, BS)
