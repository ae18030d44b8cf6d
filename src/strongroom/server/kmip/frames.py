"""KMIP's TTLV messages read within bounds, before any decoder sees them.

A TTLV item is a 3-byte tag, a 1-byte type, a 4-byte big-endian length and the value, padded to
a multiple of 8 bytes; a structure's value is a run of items.  A peer controls every length, so
a message is refused — with nothing allocated for it — when its header declares more than
``MAX_MESSAGE`` bytes, and its items are walked (iteratively: depth is bounded, not the Python
stack) to check that each length fits its parent, that fixed-size types have their size, that
padding is where the length says, that tags are KMIP's (0x42....) or extensions (0x54....), and
that nesting and item counts stay within bounds.  Only then is the message handed to a decoder.
"""

from __future__ import annotations

import asyncio
import struct

HEADER = 8
MAX_MESSAGE = 1 << 20
MAX_DEPTH = 16
MAX_ITEMS = 10_000
STRUCTURE = 0x01
REQUEST_MESSAGE = 0x420078
# type -> the exact value length it must have (None: any, checked otherwise)
FIXED = {0x01: None, 0x02: 4, 0x03: 8, 0x04: None, 0x05: 4, 0x06: 8, 0x07: None, 0x08: None, 0x09: 8, 0x0A: 4, 0x0B: 8}


class FrameError(ValueError):
    """A frame this server will not decode; the message is fit for a KMIP error's reason text."""


class IdleTimeout(FrameError):
    """No message began within the idle time: the connection is closed without an answer."""


def _pad(n: int) -> int:
    return (n + 7) & ~7


def _tag_ok(tag: int) -> bool:
    return (tag >> 16) in (0x42, 0x54)


def check_header(head: bytes, max_message: int = MAX_MESSAGE) -> int:
    """The length of the message whose 8-byte header this is: a request message, a structure,
    within the bound."""
    if len(head) != HEADER:
        raise FrameError("truncated message header")
    tag = int.from_bytes(head[:3], "big")
    kind, length = head[3], struct.unpack(">I", head[4:])[0]
    if tag != REQUEST_MESSAGE or kind != STRUCTURE:
        raise FrameError("not a KMIP request message")
    if length > max_message:
        raise FrameError(f"message of {length} bytes is over the {max_message}-byte limit")
    if length % 8:
        raise FrameError("a structure's length is a multiple of 8")
    return int(length)


def validate(body: bytes) -> None:
    """Walk the items of a structure's value (``body``) within the bounds; FrameError if any
    item does not fit."""
    ends = [len(body)]  # the end offset of each open structure
    pos = items = 0
    while ends:
        if pos == ends[-1]:
            ends.pop()
            continue
        if pos + HEADER > ends[-1]:
            raise FrameError("an item's header runs past its structure")
        tag = int.from_bytes(body[pos : pos + 3], "big")
        kind = body[pos + 3]
        length = struct.unpack(">I", body[pos + 4 : pos + 8])[0]
        items += 1
        if items > MAX_ITEMS:
            raise FrameError(f"more than {MAX_ITEMS} items in one message")
        if not _tag_ok(tag):
            raise FrameError(f"tag 0x{tag:06x} is not a KMIP tag")
        if kind not in FIXED:
            raise FrameError(f"item type 0x{kind:02x} is not a KMIP type")
        size = FIXED[kind]
        if size is not None and length != size:
            raise FrameError(f"an item of type 0x{kind:02x} has {length} bytes, not {size}")
        if kind == 0x04 and length % 8:
            raise FrameError("a big integer's length is a multiple of 8")
        start = pos + HEADER
        end = start + _pad(length)
        if end > ends[-1]:
            raise FrameError("an item runs past its structure")
        if kind == STRUCTURE:
            if length % 8:
                raise FrameError("a structure's length is a multiple of 8")
            if len(ends) > MAX_DEPTH:
                raise FrameError(f"structures nested deeper than {MAX_DEPTH}")
            ends.append(start + length)
            pos = start
            continue
        if any(body[start + length : end]):
            raise FrameError("padding that is not zero")
        pos = end


async def read_message(
    reader: asyncio.StreamReader, timeout: float, max_message: int = MAX_MESSAGE, idle: float | None = None
) -> bytes:
    """One whole request message (header and value), read within ``idle`` seconds (default
    ``timeout``) for its header and ``timeout`` for its value, checked; FrameError, or EOFError
    for a closed stream (IdleTimeout: no message began in time)."""
    # asyncio.timeout, not wait_for: no task per read, on the path of every message
    try:
        async with asyncio.timeout(idle if idle is not None else timeout):
            head = await reader.readexactly(HEADER)
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            raise EOFError("the peer closed the connection") from None
        raise FrameError("truncated message header") from None
    except TimeoutError:
        raise IdleTimeout("no message header in time") from None
    length = check_header(head, max_message)
    try:
        async with asyncio.timeout(timeout):
            body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise FrameError("truncated message") from None
    except TimeoutError:
        raise FrameError("the message did not arrive in time") from None
    validate(body)
    return head + body
