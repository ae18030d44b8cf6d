"""KMIP frames within bounds: what PyKMIP's encoder writes passes; a 100 MB length field is
refused from the header alone; truncated and silent frames are FrameErrors; misaligned, deeply
nested, mistyped and random bodies are refused by the decoder's walk (Malformed) -- never
another exception or a hang."""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from strongroom.server.kmip import frames
from strongroom.server.kmip.ttlv import Malformed, decode


def _item(tag: int, kind: int, value: bytes) -> bytes:
    pad = b"\0" * (-len(value) % 8)
    return tag.to_bytes(3, "big") + bytes([kind]) + struct.pack(">I", len(value)) + value + pad


def _structure(tag: int, *items: bytes) -> bytes:
    return _item(tag, 0x01, b"".join(items))


def _pykmip_request() -> bytes:
    from kmip.core import enums, utils
    from kmip.core.messages import contents, messages, payloads

    header = messages.RequestHeader(protocol_version=contents.ProtocolVersion(1, 2), batch_count=contents.BatchCount(1))
    batch = messages.RequestBatchItem(operation=contents.Operation(enums.Operation.DISCOVER_VERSIONS),
                                      request_payload=payloads.DiscoverVersionsRequestPayload())  # fmt: skip
    stream = utils.BytearrayStream()
    messages.RequestMessage(request_header=header, batch_items=[batch]).write(stream)
    return bytes(stream.buffer)


async def _read(data: bytes, eof: bool = True) -> bytes:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return await frames.read_message(reader, 0.5)


def test_what_pykmip_writes_passes() -> None:
    raw = _pykmip_request()
    assert asyncio.run(_read(raw)) == raw


def test_a_100_mb_length_is_refused_from_the_header() -> None:
    head = (0x420078).to_bytes(3, "big") + b"\x01" + struct.pack(">I", 100 << 20)
    with pytest.raises(frames.FrameError, match="over the"):
        asyncio.run(_read(head, eof=False))  # nothing more is read, nothing allocated


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x42\x00\x78\x01\x00\x00", "truncated message header"),
        (_structure(0x420078, _item(0x420001, 0x02, b"\0\0\0\1"))[:-4], "truncated message"),
        (_structure(0x420077, b""), "not a KMIP request"),
    ],
)
def test_bad_frames(data: bytes, why: str) -> None:
    with pytest.raises(frames.FrameError, match=why):
        asyncio.run(_read(data))


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (_structure(0x420078, _item(0x420001, 0x02, b"\0\0\0\0\0\0\0\1")), "not 4"),
        (_structure(0x420078, _item(0x110001, 0x02, b"\0\0\0\1")), "not a KMIP tag"),
        (_structure(0x420078, _item(0x420001, 0x0F, b"x")), "not a KMIP type"),
        (_structure(0x420078, _item(0x420001, 0x07, b"abc")[:-1] + b"Z"), "padding"),
        (_structure(0x420078, _item(0x420001, 0x04, b"\1\2\3")), "multiple of 8"),
        (_structure(0x420078, _item(0x420001, 0x06, b"\0" * 7 + b"\2")), "neither 0 nor 1"),
        (_structure(0x420078, _item(0x420001, 0x07, b"\xff\xfe")), "not UTF-8"),
        (_structure(0x420078, *[_item(0x420001, 0x02, b"\0\0\0\1")] * 10_001), "more than 10000 items"),
    ],
)
def test_bad_bodies(data: bytes, why: str) -> None:
    raw = asyncio.run(_read(data))  # the frame is whole: the stream stays in step
    with pytest.raises(Malformed, match=why):
        decode(raw)


def test_deep_nesting_is_refused() -> None:
    inner = _item(0x420001, 0x02, b"\0\0\0\1")
    for _ in range(100):
        inner = _structure(0x420001, inner)
    with pytest.raises(Malformed, match="nested deeper"):
        decode(asyncio.run(_read(_structure(0x420078, inner))))


def test_a_silent_peer_times_out() -> None:
    with pytest.raises(frames.FrameError, match="in time"):
        asyncio.run(_read(b"\x42\x00\x78\x01", eof=False))


@settings(max_examples=300, deadline=None)
@given(hs.binary(max_size=512))
def test_random_bodies_are_refused_or_valid(body: bytes) -> None:
    try:
        decode(struct.pack(">II", 0x42007801, len(body)) + body)
    except Malformed:
        pass


@settings(max_examples=200, deadline=None)
@given(hs.binary(max_size=256), hs.integers(0, 63))
def test_a_valid_message_with_one_byte_changed(noise: bytes, where: int) -> None:
    raw = bytearray(_pykmip_request())
    raw[where % len(raw)] ^= (noise[:1] or b"\x01")[0] | 1
    try:
        decode(asyncio.run(_read(bytes(raw))))
    except (frames.FrameError, EOFError, Malformed):
        pass
