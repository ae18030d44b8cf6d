"""A fault that cannot be caused for real: the writer's action failing unexpectedly (a bug) or
the writer process being away.  The listener still answers every item with General Failure and
keeps the connection; the writer's link is the one stub here.  And KMIP's bounds in config.json
are refused at load when they are not numbers in range."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from strongroom.server import messages as m
from strongroom.server.errors import Unavailable
from strongroom.server.kmip import protocol
from strongroom.server.kmip import tags as t
from strongroom.server.kmip.listener import Listener
from strongroom.server.kmip.ttlv import decode
from tests.server.kmip.kmiphelp import request, results


class FailingLink:
    def __init__(self, error: Exception) -> None:
        self.error = error

    async def call(self, raw_path: str, checked: Any, body: Any) -> Any:
        raise self.error


@pytest.mark.parametrize("error", [m.WriterInternalError("KeyError"), Unavailable("the writer process is not answering")])
def test_every_item_answered_when_the_writer_fails(error: Exception) -> None:
    listener = Listener.__new__(Listener)  # no socket: only the message path is exercised
    listener.link = FailingLink(error)  # type: ignore[assignment]
    counted: list[tuple[str, str]] = []
    listener.count = lambda op, result: counted.append((op, result))
    req = protocol.parse(request((t.OP_GET, None), (t.OP_CREATE, None), option=t.BATCH_CONTINUE))
    out = results(decode(asyncio.run(listener._run("a" * 32, req))))
    assert [(st, r) for st, r, _ in out] == [(t.OPERATION_FAILED, t.GENERAL_FAILURE)] * 2
    assert counted == [("get", "general_failure"), ("create", "general_failure")]


@pytest.mark.parametrize(
    "bad",
    [
        {"kmip_connections_per_client": 0},
        {"kmip_connections_per_client": True},
        {"kmip_connections_per_client": 2.5},
        {"kmip_idle_timeout": 0},
        {"kmip_idle_timeout": "300"},
        {"kmip_idle_timeout": float("nan")},
    ],
)
def test_kmip_bounds_in_config_are_checked_at_load(bad: dict[str, Any]) -> None:
    from strongroom.server.datadir import ServerConfig

    with pytest.raises(ValueError, match="kmip_"):
        ServerConfig(db_url="sqlite:///x", **bad)
    assert ServerConfig(db_url="sqlite:///x", kmip_idle_timeout=5, kmip_connections_per_client=1).kmip_idle_timeout == 5
