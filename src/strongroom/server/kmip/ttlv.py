"""TTLV as a tree: a message (its size already bounded by frames.py) decoded into ``Item``s in
one walk that also holds it to its bounds, and items encoded back.

A TTLV item is a 3-byte tag, a 1-byte type, a 4-byte big-endian length and the value, padded to
a multiple of 8 bytes; a structure's value is a run of items.  A peer controls every length, so
the walk checks that each item fits its parent, that fixed-size types have their size, that
padding is zero, that tags are KMIP's (0x42....) or extensions (0x54....), and that nesting
(16) and the item count (10,000) stay within bounds.  The tree knows types, not meanings; the
operations (ops.py) read it by tag.  Every refusal is ``Malformed`` (answered as KMIP's Invalid
Message)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from strongroom.server.kmip import tags as t

_INTS = {t.INTEGER: ">i", t.LONG: ">q", t.ENUM: ">I", t.DATETIME: ">q", t.INTERVAL: ">I", t.DATETIME_EXT: ">q"}


class Malformed(ValueError):
    """An item whose value its type cannot hold (text that is not UTF-8, a boolean that is
    neither 0 nor 1), or a request missing what its operation needs."""


@dataclass(slots=True)
class Item:
    tag: int
    kind: int
    value: Any  # list[Item] for a structure, int, bool, str or bytes otherwise

    def find(self, tag: int) -> Item | None:
        if self.kind == t.STRUCTURE:
            for c in self.value:
                if c.tag == tag:
                    found: Item = c
                    return found
        return None

    def all(self, tag: int) -> list[Item]:
        return [c for c in self.value if c.tag == tag] if self.kind == t.STRUCTURE else []

    def get(self, tag: int, kind: int, default: Any = None) -> Any:
        """The value of the first child ``tag``, which must be of ``kind``."""
        c = self.find(tag)
        if c is None:
            return default
        if c.kind != kind:
            raise Malformed(f"item 0x{tag:06x} has type {c.kind}, not {kind}")
        return c.value

    def need(self, tag: int, kind: int) -> Any:
        v = self.get(tag, kind)
        if v is None:
            raise Malformed(f"item 0x{tag:06x} is missing")
        return v


MAX_DEPTH = 16
MAX_ITEMS = 10_000
_HEAD = struct.Struct(">II")  # (tag << 8 | type, length)
_UNPACK = {kind: struct.Struct(fmt) for kind, fmt in _INTS.items()}
_ZERO = bytes(8)


def decode(data: bytes) -> Item:
    """The one item ``data`` holds, within the bounds; Malformed otherwise."""
    count = [0]
    item, end = _decode(memoryview(data), 0, len(data), 0, count)
    if end != len(data):
        raise Malformed("bytes after the message")
    return item


def _decode(buf: memoryview, pos: int, limit: int, depth: int, count: list[int]) -> tuple[Item, int]:
    if pos + 8 > limit:
        raise Malformed("an item's header runs past its structure")
    head, length = _HEAD.unpack_from(buf, pos)
    tag, kind = head >> 8, head & 0xFF
    count[0] += 1
    if count[0] > MAX_ITEMS:
        raise Malformed(f"more than {MAX_ITEMS} items in one message")
    if tag >> 16 not in (0x42, 0x54):
        raise Malformed(f"tag 0x{tag:06x} is not a KMIP tag")
    start = pos + 8
    end = start + length
    padded = start + ((length + 7) & ~7)
    if padded > limit:
        raise Malformed("an item runs past its structure")
    value: Any
    if kind == t.STRUCTURE:
        if length % 8:
            raise Malformed("a structure's length is a multiple of 8")
        if depth >= MAX_DEPTH:
            raise Malformed(f"structures nested deeper than {MAX_DEPTH}")
        children, p = [], start
        while p < end:
            child, p = _decode(buf, p, end, depth + 1, count)
            children.append(child)
        return Item(tag, kind, children), end
    if buf[end:padded] != _ZERO[: padded - end]:
        raise Malformed("padding that is not zero")
    unpack = _UNPACK.get(kind)
    if unpack is not None:
        if length != unpack.size:
            raise Malformed(f"an item of type 0x{kind:02x} has {length} bytes, not {unpack.size}")
        value = unpack.unpack_from(buf, start)[0]
    elif kind == t.BOOL:
        if length != 8:
            raise Malformed(f"an item of type 0x{kind:02x} has {length} bytes, not 8")
        flag = int.from_bytes(buf[start:end], "big")
        if flag not in (0, 1):
            raise Malformed("a boolean that is neither 0 nor 1")
        value = bool(flag)
    elif kind == t.TEXT:
        try:
            value = str(buf[start:end], "utf-8")
        except UnicodeDecodeError:
            raise Malformed("a text string that is not UTF-8") from None
    elif kind == t.BYTES:
        value = bytes(buf[start:end])
    elif kind == t.BIG:
        if length % 8:
            raise Malformed("a big integer's length is a multiple of 8")
        value = bytes(buf[start:end])
    else:
        raise Malformed(f"item type 0x{kind:02x} is not a KMIP type")
    return Item(tag, kind, value), padded


PRE_ENCODED = 0  # an Item whose value is already its whole TTLV (a payload the writer encoded)


_PACK = {kind: struct.Struct(fmt).pack for kind, fmt in _INTS.items()}
_PADS = [b"\0" * n for n in range(8)]
_TRUE, _FALSE = struct.pack(">Q", 1), struct.pack(">Q", 0)


def encode(item: Item) -> bytes:
    kind, v = item.kind, item.value
    if kind == PRE_ENCODED:
        return bytes(v)
    if kind == t.STRUCTURE:
        raw = b"".join([encode(c) for c in v])
    elif kind == t.TEXT:
        raw = v.encode("utf-8")
    elif kind == t.BOOL:
        raw = _TRUE if v else _FALSE
    elif kind in _PACK:
        raw = _PACK[kind](v)
    else:
        raw = bytes(v)
    n = len(raw)
    return _HEAD.pack(item.tag << 8 | kind, n) + raw + _PADS[-n % 8]


def s(tag: int, *children: Item | None) -> Item:
    """A structure of the children that are there."""
    return Item(tag, t.STRUCTURE, [c for c in children if c is not None])


def e(tag: int, value: int) -> Item:
    return Item(tag, t.ENUM, value)


def i(tag: int, value: int) -> Item:
    return Item(tag, t.INTEGER, value)


def txt(tag: int, value: str) -> Item:
    return Item(tag, t.TEXT, value)


def b(tag: int, value: bytes) -> Item:
    return Item(tag, t.BYTES, value)


def dt(tag: int, value: int) -> Item:
    return Item(tag, t.DATETIME, value)
