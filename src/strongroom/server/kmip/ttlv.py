"""TTLV as a tree: a message that frames.py found within bounds, decoded into ``Item``s, and
items encoded back.  The tree knows types, not meanings; the operations (ops.py) read it by
tag.  Decoding errors are ``Malformed`` (answered as KMIP's Invalid Message)."""

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


def decode(data: bytes) -> Item:
    """The one item ``data`` holds (a whole message, already checked by frames.validate)."""
    item, end = _decode(memoryview(data), 0, 0)
    if end != len(data):
        raise Malformed("bytes after the message")
    return item


def _decode(buf: memoryview, pos: int, depth: int) -> tuple[Item, int]:
    if depth > 32:  # frames.py allows 16; a second bound so this walk never meets Python's
        raise Malformed("nested too deep")
    if pos + 8 > len(buf):
        raise Malformed("an item's header runs past the message")
    tag = int.from_bytes(buf[pos : pos + 3], "big")
    kind = buf[pos + 3]
    length = struct.unpack_from(">I", buf, pos + 4)[0]
    start, end = pos + 8, pos + 8 + length
    if end > len(buf):
        raise Malformed("an item runs past the message")
    raw = buf[start:end]
    value: Any
    if kind == t.STRUCTURE:
        children, p = [], start
        while p < end:
            child, p = _decode(buf, p, depth + 1)
            children.append(child)
        if p != end:
            raise Malformed("a structure's items overrun it")
        value = children
    elif kind in _INTS:
        if length != struct.calcsize(_INTS[kind]):
            raise Malformed("an integer of the wrong size")
        value = struct.unpack(_INTS[kind], raw)[0]
    elif kind == t.BOOL:
        value = int.from_bytes(raw, "big")
        if length != 8 or value not in (0, 1):
            raise Malformed("a boolean that is neither 0 nor 1")
        value = bool(value)
    elif kind == t.TEXT:
        try:
            value = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise Malformed("a text string that is not UTF-8") from None
    elif kind in (t.BYTES, t.BIG):
        value = bytes(raw)
    else:
        raise Malformed(f"item type {kind} is not KMIP's")
    return Item(tag, kind, value), start + ((length + 7) & ~7)


PRE_ENCODED = 0  # an Item whose value is already its whole TTLV (a payload the writer encoded)


_HEAD = struct.Struct(">II")  # (tag << 8 | type, length)
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
