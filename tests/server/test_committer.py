"""Group commit on a real SQLite database: a batch runs without savepoints while every action
succeeds or refuses, and one action that fails outside a refusal is undone alone (the batch runs
again with a savepoint per action), its writes and its audit entries with it; the chain stays
whole and a reader of the log inside the batch sees the entries before it."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from strongroom.server import audit, barrier, storage
from strongroom.server import repository as repo
from strongroom.server.committer import GroupCommitter, Outcome
from strongroom.server.datadir import DataDir
from strongroom.server.errors import BadRequest, Denied, Refused
from strongroom.server.setup import init_server

pytestmark = pytest.mark.unit

PASSPHRASE = "correct horse battery staple"


@pytest.fixture
def committer(tmp_path: Path) -> Iterator[tuple[GroupCommitter, storage.Store, barrier.Barrier, DataDir]]:
    data = DataDir(tmp_path / "data")
    init_server(data, PASSPHRASE)
    store = storage.Store(data.load_config().db_url)
    bar = barrier.Barrier()
    with store.exclusive() as tx:
        bar.open_with(tx, barrier.Unlock(PASSPHRASE), int(repo.get_meta(tx, "seal_epoch") or "1"))
    try:
        yield GroupCommitter(store, bar, data.head_file), store, bar, data
    finally:
        store.dispose()


def _count_statements(store: storage.Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = storage.Tx.run

    def run(self: storage.Tx, sql: str, *params: Any) -> int:
        seen.append(sql)
        return real(self, sql, *params)

    monkeypatch.setattr(storage.Tx, "run", run)
    real_sp = storage.Tx.savepoint

    def savepoint(self: storage.Tx) -> Any:
        seen.append("SAVEPOINT")
        return real_sp(self)

    monkeypatch.setattr(storage.Tx, "savepoint", savepoint)
    return seen


@pytest.fixture(params=[Future, Outcome], ids=["future", "outcome"])
def slot(request: pytest.FixtureRequest) -> Any:
    """Where results go: a Future (a caller in another thread) or an Outcome (the writer's own)."""
    return request.param


def _run(c: GroupCommitter, actions: list[Any], slot: Any = Future) -> list[Any]:
    batch = [(fn, slot()) for fn in actions]
    c.run_now(batch)
    return [f for _fn, f in batch]


def _writes(key: str, fail: bool = False) -> Any:
    def act(tx: storage.Tx, aw: audit.AuditWriter) -> str:
        repo.set_meta(tx, key, "written")
        aw.append("test", "write", key, "ok")
        if fail:
            raise ValueError("bad input")
        return key

    return act


def _refuses(tx: storage.Tx, aw: audit.AuditWriter) -> None:
    aw.append("test", "refuse", "r", "denied")
    raise Refused(Denied("no"))


def _reads_log(tx: storage.Tx, aw: audit.AuditWriter) -> list[str]:
    aw.write_rows()
    aw.append("test", "read-log", "", "ok")
    return [row[4] for row in repo.audit_entries(tx, 2, 100)]  # after init's two entries


def _log_and_meta(store: storage.Store, bar: barrier.Barrier, data: DataDir) -> tuple[list[str], dict[str, Any]]:
    with store.snapshot() as tx:
        assert audit.verify(tx, bar.audit_key(), data.head_file).ok
        targets = [row[4] for row in repo.audit_entries(tx, 2, 100)]
        meta = {k: repo.get_meta(tx, k) for k in ("a", "b", "c")}
    return targets, meta


def test_a_batch_that_succeeds_runs_without_savepoints(
    committer: tuple[GroupCommitter, storage.Store, barrier.Barrier, DataDir], monkeypatch: pytest.MonkeyPatch, slot: Any
) -> None:
    c, store, bar, data = committer
    seen = _count_statements(store, monkeypatch)
    futs = _run(c, [_writes("a"), _refuses, _writes("c")], slot)
    assert futs[0].result() == "a" and futs[2].result() == "c"
    assert isinstance(futs[1].exception(), Denied)
    assert "SAVEPOINT" not in seen
    assert _log_and_meta(store, bar, data) == (["a", "r", "c"], {"a": "written", "b": None, "c": "written"})


def test_a_failed_action_is_undone_alone_with_its_entries(
    committer: tuple[GroupCommitter, storage.Store, barrier.Barrier, DataDir], monkeypatch: pytest.MonkeyPatch, slot: Any
) -> None:
    c, store, bar, data = committer
    seen = _count_statements(store, monkeypatch)
    futs = _run(c, [_writes("a"), _refuses, _writes("b", fail=True), _reads_log, _writes("c")], slot)
    assert futs[0].result() == "a" and futs[4].result() == "c"
    assert isinstance(futs[1].exception(), Denied)
    assert isinstance(futs[2].exception(), ValueError)
    # The reader inside the batch saw the entries before it, never the undone action's.
    assert futs[3].result() == ["a", "r"]
    assert seen.count("SAVEPOINT") == 5  # the second run: one per action
    assert _log_and_meta(store, bar, data) == (["a", "r", "", "c"], {"a": "written", "b": None, "c": "written"})
    # The chain goes on from there.
    _run(c, [_writes("b")])
    assert _log_and_meta(store, bar, data) == (["a", "r", "", "c", "b"], {"a": "written", "b": "written", "c": "written"})


def test_rewinding_past_written_entries_is_refused(
    committer: tuple[GroupCommitter, storage.Store, barrier.Barrier, DataDir],
) -> None:
    _c, store, bar, _data = committer
    with store.action() as (tx, seq, mac):
        aw = audit.AuditWriter(tx, seq, mac, bar.audit_key())
        aw.append("test", "one")
        mark = aw.mark()
        aw.append("test", "two")
        aw.rewind(mark)
        assert (aw.seq, aw.mac) == mark[:2]
        aw.write_rows()
        with pytest.raises(RuntimeError, match="rewinding past"):
            aw.rewind((0, b"", 5))
        aw.flush()


def test_an_outcome_is_read_only_once_settled() -> None:
    o = Outcome()
    assert not o.done()
    with pytest.raises(RuntimeError):
        o.result()
    o.set_exception(Denied("no"))
    assert o.done() and isinstance(o.exception(), Denied)
    with pytest.raises(Denied):
        o.result()
    ok = Outcome()
    ok.set_result(None)
    assert ok.exception() is None and ok.result() is None


def test_an_entry_with_a_nul_fails_its_action_alone(
    committer: tuple[GroupCommitter, storage.Store, barrier.Barrier, DataDir],
) -> None:
    """PostgreSQL stores no NUL: an entry holding one is refused as it is appended (400 for that
    action), never at the batch's flush, where it would fail every request in the batch."""
    c, store, bar, data = committer

    def nul(tx: storage.Tx, aw: audit.AuditWriter) -> None:
        aw.append("test", "write", "a\x00b", "ok")

    futs = _run(c, [_writes("a"), nul, _writes("c")])
    assert futs[0].result() == "a" and futs[2].result() == "c"
    assert isinstance(futs[1].exception(), BadRequest)
    assert _log_and_meta(store, bar, data) == (["a", "c"], {"a": "written", "b": None, "c": "written"})
