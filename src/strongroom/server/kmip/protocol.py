"""A KMIP request message's header and batch read from its tree, and the response message
built: the worker's half of every request (the operations run in the writer, ops.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from strongroom.server.kmip import tags as t
from strongroom.server.kmip.ttlv import PRE_ENCODED, Item, Malformed, decode, dt, e, encode, i, s, txt

MAX_BATCH = 64
SUPPORTED = {(1, 0), (1, 1), (1, 2), (1, 3), (1, 4), (2, 0)}


@dataclass
class Request:
    major: int
    minor: int
    keep_going: bool
    max_response: int | None
    items: list[tuple[int, bytes | None, bytes]]  # (operation, unique batch item id, payload TTLV)


class Refusal(Exception):
    """A whole message refused with a reason, answered in the request's version when known."""

    def __init__(self, reason: int, message: str, version: tuple[int, int] = (1, 0)) -> None:
        super().__init__(message)
        self.reason, self.message, self.version = reason, message, version


def parse(message: bytes) -> Request:
    try:
        root = decode(message)
        header = root.find(t.REQUEST_HEADER)
        if header is None or header.kind != t.STRUCTURE:
            raise Malformed("the message has no request header")
        pv = header.find(t.PROTOCOL_VERSION)
        if pv is None or pv.kind != t.STRUCTURE:
            raise Malformed("the header has no protocol version")
        version = (pv.need(t.PROTOCOL_VERSION_MAJOR, t.INTEGER), pv.need(t.PROTOCOL_VERSION_MINOR, t.INTEGER))
        batch = root.all(t.BATCH_ITEM)
        count = header.need(t.BATCH_COUNT, t.INTEGER)
        option = header.get(t.BATCH_ERROR_CONTINUATION_OPTION, t.ENUM, t.BATCH_STOP)
        max_response = header.get(t.MAXIMUM_RESPONSE_SIZE, t.INTEGER)
        items = []
        for item in batch:
            payload = item.find(t.REQUEST_PAYLOAD)
            batch_id = item.get(t.UNIQUE_BATCH_ITEM_ID, t.BYTES)
            items.append((item.need(t.OPERATION, t.ENUM), batch_id, encode(payload) if payload is not None else b""))
    except Malformed as err:
        raise Refusal(t.INVALID_MESSAGE, str(err)) from None
    if version not in SUPPORTED:
        raise Refusal(t.INVALID_MESSAGE, f"protocol version {version[0]}.{version[1]} is not supported (see Discover Versions)")
    if count != len(batch) or not batch:
        raise Refusal(t.INVALID_MESSAGE, "the batch count does not match the batch items", version)
    if len(batch) > MAX_BATCH:
        raise Refusal(t.INVALID_MESSAGE, f"more than {MAX_BATCH} batch items in one message", version)
    if option == t.BATCH_UNDO:
        raise Refusal(t.FEATURE_NOT_SUPPORTED, "batch error continuation option Undo is not supported", version)
    return Request(version[0], version[1], option == t.BATCH_CONTINUE, max_response, items)


Outcome = tuple[int | None, bytes | None, int, int, str, bytes]  # (op, batch id, status, reason, message, payload)


def response(version: tuple[int, int], outcomes: Sequence[Outcome], max_size: int | None = None) -> bytes:
    body = _response(version, outcomes)
    if max_size is not None and len(body) > max_size:
        why = "the response is over the Maximum Response Size"
        body = _response(version, [(o[0], o[1], t.OPERATION_FAILED, t.RESPONSE_TOO_LARGE, why, b"") for o in outcomes])
    return body


def _response(version: tuple[int, int], outcomes: Sequence[Outcome]) -> bytes:
    header = s(
        t.RESPONSE_HEADER,
        s(t.PROTOCOL_VERSION, i(t.PROTOCOL_VERSION_MAJOR, version[0]), i(t.PROTOCOL_VERSION_MINOR, version[1])),
        dt(t.TIME_STAMP, int(time.time())),
        i(t.BATCH_COUNT, len(outcomes)),
    )
    items = []
    for op, batch_id, status, reason, message, payload in outcomes:
        items.append(
            s(
                t.BATCH_ITEM,
                e(t.OPERATION, op) if op is not None else None,
                Item(t.UNIQUE_BATCH_ITEM_ID, t.BYTES, batch_id) if batch_id is not None else None,
                e(t.RESULT_STATUS, status),
                e(t.RESULT_REASON, reason) if status != t.SUCCESS else None,
                txt(t.RESULT_MESSAGE, message) if status != t.SUCCESS else None,
                Item(t.RESPONSE_PAYLOAD, PRE_ENCODED, payload) if payload else None,
            )
        )
    return encode(s(t.RESPONSE_MESSAGE, header, *items))


def refusal(err: Refusal) -> bytes:
    return response(err.version, [(None, None, t.OPERATION_FAILED, err.reason, err.message, b"")])
