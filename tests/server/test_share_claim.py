"""Shares given to the processes of a server: when two processes each hold boxes for enough
shares (one received the last share, the other's tick sees them), exactly one claims them --
taking and forgetting happen in one transaction -- so one unseal happens and is audited once.
(CI met the race on PostgreSQL: two 'unseal ok' entries for one unseal.)"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from strongroom.crypto import shares
from strongroom.server import barrier, storage
from strongroom.server.datadir import DataDir
from strongroom.server.nodes import NodeAgent
from strongroom.server.setup import init_server
from strongroom.server.unsealing import ShareCollector

pytestmark = pytest.mark.unit


def test_of_two_processes_that_could_combine_one_does(tmp_path: Path) -> None:
    data = DataDir(tmp_path / "data")
    init_server(data, barrier.Unlock(), None, key_shares=3, key_threshold=2)
    store = storage.Store(data.load_config().db_url)
    try:
        agents = [NodeAgent(store, barrier.Barrier(), data.node_key()) for _ in range(2)]
        for agent in agents:
            agent.join()
        given = shares.split(os.urandom(32), 3, 2)
        with store.exclusive() as tx:  # two shares given, each sealed to both processes
            for i, share in enumerate(given[:2]):
                ShareCollector(agents[0]).add(tx, "unseal", i, share, "admin")
        claimed: list[object] = []
        start = threading.Barrier(2)

        def claim(agent: NodeAgent) -> None:
            start.wait()
            with store.exclusive() as tx:
                claimed.append(ShareCollector(agent).claim(tx, "unseal", 2))

        threads = [threading.Thread(target=claim, args=(a,)) for a in agents]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        won = [c for c in claimed if c is not None]
        assert len(won) == 1 and sorted(won[0][0]) == sorted(given[:2]) and won[0][1] == ["admin"]  # type: ignore[index]
        with store.exclusive() as tx:
            assert ShareCollector(agents[0]).given(tx, "unseal") == set()
    finally:
        store.dispose()
