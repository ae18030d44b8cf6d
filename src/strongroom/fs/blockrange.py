"""Which plaintext blocks a write or a truncation touches, and which of them must be read first.

Pure arithmetic over sizes and offsets, kept apart from the I/O so that it can be checked
exhaustively (tests/fs/test_blockrange.py replays every small case against a byte model). A
file's plaintext is cut into blocks of ``bs`` bytes; only the last may be shorter (FORMAT.md §5).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WritePlan:
    """How to write ``length`` bytes at ``offset`` into a file of ``size`` bytes.

    The sealed region starts at block ``first``. Without ``merge`` it is the data alone; with it,
    the region runs from ``first * bs`` to ``region_end`` and holds: the first block's ``head``
    bytes before the write (read from the file when ``read_head``, zeros otherwise), the data,
    and the surviving tail of block ``read_tail`` (read from the file) when there is one.
    ``pad_block``, when set, is the file's old last block, cut short and lying before ``first``:
    it is read, padded with zeros to a whole block and sealed again, since only a file's last
    block may be short.
    """

    first: int
    pad_block: int | None
    merge: bool
    region_end: int
    head: int
    read_head: bool
    read_tail: int | None


def plan_write(size: int, offset: int, length: int, bs: int) -> WritePlan:
    if length <= 0 or offset < 0 or size < 0:
        raise ValueError("a write needs a positive length at a non-negative offset")
    end = offset + length
    first, last = offset // bs, (end - 1) // bs
    old_last = (size - 1) // bs  # -1 for an empty file
    pad_block = old_last if size % bs and first > old_last else None
    # Sealed whole blocks need nothing read: a write that starts on a block boundary and ends
    # on one, or at or past the file's end (the new last block may be short).
    merge = not (offset % bs == 0 and (end % bs == 0 or end >= size))
    if not merge:
        return WritePlan(first, pad_block, False, end, 0, False, None)
    region_end = max(end, min(size, (last + 1) * bs))
    head = offset - first * bs
    read_head = bool(head) and first * bs < size
    # One read of the first block also gives the tail when the write ends inside that block.
    read_tail = last if end < region_end and not (last == first and read_head) else None
    return WritePlan(first, pad_block, True, region_end, head, read_head, read_tail)


def shrink_plan(length: int, bs: int) -> tuple[int, int]:
    """Cutting a file to ``length`` > 0 bytes: (its new last block, the bytes that block keeps)."""
    if length <= 0:
        raise ValueError("a shrink keeps at least one byte")
    last = (length - 1) // bs
    return last, length - last * bs
