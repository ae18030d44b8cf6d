"""KMIP's TTLV messages framed off a stream within bounds: a request message's 8-byte header
(its tag, type and length) is checked first, and a message declaring more than ``MAX_MESSAGE``
bytes is refused with nothing allocated for it; its body must then arrive within the deadline.
What the body holds is checked by the decoder's one walk (ttlv.py): a frame read whole keeps the
stream in step, so a bad body is answered on a connection that stays, while a frame that cannot
be read (FrameError) is answered and the connection closed."""

from __future__ import annotations

import asyncio
import struct

HEADER = 8
MAX_MESSAGE = 1 << 20
STRUCTURE = 0x01
REQUEST_MESSAGE = 0x420078


class FrameError(ValueError):
    """A frame this server will not decode; the message is fit for a KMIP error's reason text."""


class IdleTimeout(FrameError):
    """No message began within the idle time: the connection is closed without an answer."""


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
    return head + body
