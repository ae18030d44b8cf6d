"""The audit chain head mirrored in the data dir is durable before a batch is acknowledged.
A power cut cannot be caused here, so the tests watch for the flush itself (mocking only the
fault): every batch's head line is written before the commit and durable (by the commit's flush
or its own) before any of the batch's futures resolves, and a crash between the head's flush and the database's commit leaves
a state that verify accepts only when the database ends exactly where the batch began."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from strongroom.server import audit, barrier, storage
from strongroom.server import repository as repo
from strongroom.server.committer import GroupCommitter
from strongroom.server.datadir import DataDir
from strongroom.server.headfile import HeadFile, Mirror
from strongroom.server.setup import init_server

pytestmark = pytest.mark.unit  # the fast tier: no root, FUSE, PostgreSQL or server process

PASSPHRASE = "correct horse battery staple"


def _watch_flushes(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[tuple[int, bytes]]:
    """The flushes of ``path`` from now on (another test's committer thread may still settle its
    own head file meanwhile)."""
    flushed: list[tuple[int, bytes]] = []
    real = os.fdatasync

    def watch(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if name == str(path):
            flushed.append((os.fstat(fd).st_ino, Path(name).read_bytes()))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", watch)
    return flushed


def test_every_advance_is_flushed_before_it_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    head = HeadFile(tmp_path / "audit.head")
    flushed = _watch_flushes(monkeypatch, tmp_path / "audit.head")
    head.advance(1, b"\x01" * 32)
    head.advance(2, b"\x02" * 32)
    head.advance(1, b"\x03" * 32)  # never moved back: nothing written, nothing to flush
    ino = (tmp_path / "audit.head").stat().st_ino
    assert [(i, data.split()[0]) for i, data in flushed] == [(ino, b"1"), (ino, b"2")]
    assert head.read() == Mirror(2, b"\x02" * 32)
    assert (tmp_path / "audit.head").stat().st_mode & 0o777 == 0o600


def test_pending_line_then_settled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    head = HeadFile(tmp_path / "audit.head")
    a, b, c = (1, b"\x01" * 32), (4, b"\x04" * 32), (6, b"\x06" * 32)
    head.advance(*a)
    flushed = _watch_flushes(monkeypatch, tmp_path / "audit.head")
    head.begin(a, b)
    assert head.read() == Mirror(4, b[1], a) and flushed == []
    head.sync()
    assert len(flushed) == 1 and flushed[0][1].split()[:3] == [b"4", b[1].hex().encode(), b"1"]
    head.begin(b, c)  # another batch began before the first settled: settling the first is a no-op
    head.settle(*b)
    assert head.read() == Mirror(6, c[1], b) and len(flushed) == 1
    head.settle(*c)
    assert head.read() == Mirror(6, c[1]) and len(flushed) == 2
    head.advance(*b)  # init and restore never move a settled head back
    assert head.read() == Mirror(6, c[1])


def test_a_filesystem_refusing_direct_writes_gets_buffered_flushed_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """O_DIRECT opens but refuses the block (EINVAL: another block size): the file falls back to
    buffered writes that the committer flushes itself, instead of failing every batch."""
    real = os.pwritev

    def refuse_direct(fd: int, buffers: list[mmap.mmap], offset: int) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "pwritev", refuse_direct)
    (tmp_path / "db").write_bytes(b"")
    head = HeadFile(tmp_path / "audit.head")
    assert not head.covered_by(str(tmp_path / "db"))
    flushed = _watch_flushes(monkeypatch, tmp_path / "audit.head")
    head.begin((1, b"\x01" * 32), (2, b"\x02" * 32))
    head.sync()
    assert head.read() == Mirror(2, b"\x02" * 32, (1, b"\x01" * 32)) and len(flushed) == 1


@pytest.mark.parametrize("covered", [True, False], ids=["flushed-by-commit", "flushed-beside-commit"])
def test_committer_answers_only_after_the_head_is_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, covered: bool) -> None:
    """Each batch writes its head line before the database commits and is answered only after
    that line is durable: through the commit's own flush (O_DIRECT, same filesystem as the
    SQLite file) or through its own fdatasync beside the commit."""
    data = DataDir(tmp_path / "data")
    init_server(data, PASSPHRASE)
    store = storage.Store(data.load_config().db_url)
    bar = barrier.Barrier()
    with store.exclusive() as tx:
        bar.open_with(tx, barrier.Unlock(PASSPHRASE), int(repo.get_meta(tx, "seal_epoch") or "1"))
    head = data.head_file
    assert head.covered_by(store.database_file)  # tmp_path: a local filesystem with O_DIRECT
    assert fcntl.fcntl(head._open(), fcntl.F_GETFL) & os.O_DIRECT
    if not covered:
        monkeypatch.setattr(head, "covered_by", lambda _db: False)
    committer = GroupCommitter(store, bar, head)
    events: list[str] = []
    real_begin, real_sync, real_action = head.begin, head.sync, store.action

    def begin(before: tuple[int, bytes], after: tuple[int, bytes]) -> None:
        real_begin(before, after)
        events.append("begin")

    def sync() -> None:
        real_sync()
        events.append("flushed")

    @contextlib.contextmanager
    def action() -> Iterator[tuple[storage.Tx, int, bytes]]:
        with real_action() as opened:
            yield opened
        events.append("committed")

    monkeypatch.setattr(head, "begin", begin)
    monkeypatch.setattr(head, "sync", sync)
    monkeypatch.setattr(store, "action", action)
    done = threading.Event()
    try:

        def act(tx: storage.Tx, aw: audit.AuditWriter) -> int:
            aw.append("test", "probe", "", "ok")
            return aw.seq

        for _ in range(3):
            fut = committer.submit(act)
            fut.add_done_callback(lambda _f: (events.append("answered"), done.set()))
            seq = fut.result(10)
            assert done.wait(10)
            done.clear()
            mirrored = head.read()
            assert mirrored is not None and mirrored.seq == seq
            if covered:
                assert events[-3:] == ["begin", "committed", "answered"]
            else:
                assert events[-4] == "begin" and set(events[-3:-1]) == {"committed", "flushed"}
                assert events[-1] == "answered"
            events.clear()
        with store.snapshot() as tx:
            assert audit.verify(tx, bar.audit_key(), head).ok
    finally:
        store.dispose()


def _truncate_to(store: storage.Store, last: int) -> None:
    with store.exclusive() as tx:
        keep = tx.one("SELECT seq, mac FROM audit WHERE seq = ?", last)
        tx.run("DELETE FROM audit WHERE seq > ?", last)
        tx.run("UPDATE audit_head SET seq = ?, mac = ?", *keep)


def test_verify_accepts_only_the_uncommitted_batch(tmp_path: Path) -> None:
    """The head file says a batch from entry 2 to 5 was in flight: a database ending at 2 is that
    crash (accepted); one ending at 1 lost an acknowledged entry (refused)."""
    data = DataDir(tmp_path / "data")
    init_server(data, PASSPHRASE)  # entries 1 and 2
    store = storage.Store(data.load_config().db_url)
    bar = barrier.Barrier()
    try:
        with store.snapshot() as tx:
            bar.open_with(tx, barrier.Unlock(PASSPHRASE), 1)
            mac2 = bytes(tx.value("SELECT mac FROM audit WHERE seq = 2"))
        data.head_file.begin((2, mac2), (5, os.urandom(32)))
        with store.snapshot() as tx:
            assert audit.verify(tx, bar.audit_key(), data.head_file).ok
        data.head_file.begin((2, os.urandom(32)), (5, os.urandom(32)))  # not where the log ends
        with store.snapshot() as tx:
            assert not audit.verify(tx, bar.audit_key(), data.head_file).ok
        data.head_file.begin((2, mac2), (5, os.urandom(32)))
        _truncate_to(store, 1)
        with store.snapshot() as tx:
            result = audit.verify(tx, bar.audit_key(), data.head_file)
        assert not result.ok and "truncated" in result.reason
    finally:
        store.dispose()


@pytest.mark.parametrize("wipe", ["removed", "emptied", "garbage"])
def test_a_wiped_head_file_does_not_verify(tmp_path: Path, wipe: str) -> None:
    """The chain's tail cut in the database (its head row moved back to match, as anyone with the
    database can) and the data dir's head file removed, emptied or overwritten: verify refuses
    (it said "ok" when the file was gone)."""
    data = DataDir(tmp_path / "data")
    init_server(data, PASSPHRASE)  # entries 1 and 2
    store = storage.Store(data.load_config().db_url)
    bar = barrier.Barrier()
    try:
        _truncate_to(store, 1)
        if wipe == "removed":
            data.head_file.path.unlink()
        else:
            data.head_file.path.write_bytes(b"" if wipe == "emptied" else b"not a head\n")
        with store.snapshot() as tx:
            bar.open_with(tx, barrier.Unlock(PASSPHRASE), 1)
            result = audit.verify(tx, bar.audit_key(), data.head_file)
        assert not result.ok and "head file" in result.reason, result
    finally:
        store.dispose()


def test_a_checkpoint_kept_elsewhere_catches_what_one_data_dir_cannot(tmp_path: Path) -> None:
    """Several servers on one database: a data dir's head file follows only its own server's
    batches, so entries another server wrote after them can be cut from the chain and this data
    dir verifies "intact".  A checkpoint taken earlier (`server audit checkpoint`, kept elsewhere)
    names the later entry, and `audit verify --checkpoint` fails."""
    from tests.serverproc import cli

    data = DataDir(tmp_path / "data")
    init_server(data, PASSPHRASE)  # entries 1 and 2; this data dir's head says 2
    stale = data.head_file.path.read_bytes()  # what a data dir that wrote nothing since looks like
    pw = tmp_path / "pw"
    pw.write_text(PASSPHRASE)
    store = storage.Store(data.load_config().db_url)
    bar = barrier.Barrier()
    try:
        with store.exclusive() as tx:  # "another server" writes entries 3-5
            bar.open_with(tx, barrier.Unlock(PASSPHRASE), 1)
            seq, mac = audit.checkpoint(tx)
            aw = audit.AuditWriter(tx, seq, mac, bar.audit_key())
            for i in range(3):
                aw.append("other-server", "deposit.put", f"k{i}", "ok")
            aw.flush()
        r = cli("server", "audit", "checkpoint", "--data", str(data.path), "--passphrase-file", str(pw))
        assert r.returncode == 0, r.stderr
        kept = r.stdout.decode().strip()
        assert kept.startswith("5:"), kept
        _truncate_to(store, 2)  # cut what "the other server" wrote
    finally:
        store.dispose()
    data.head_file.path.write_bytes(stale)
    verify = ["server", "audit", "verify", "--data", str(data.path), "--passphrase-file", str(pw)]
    assert cli(*verify).returncode == 0  # this data dir alone cannot tell
    r = cli(*verify, "--checkpoint", kept)
    assert r.returncode == 1 and b"checkpoint names entry 5" in r.stdout, r.stdout
    seq2 = "2:" + "00" * 32
    r = cli(*verify, "--checkpoint", seq2)
    assert r.returncode == 1 and b"differs from the checkpoint" in r.stdout, r.stdout
    r = cli(*verify, "--checkpoint", "two:zz")
    assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and b"not a checkpoint" in r.stderr, r.stderr


def test_each_data_dir_follows_the_chains_head_whoever_wrote_it(tmp_path: Path) -> None:
    """The writer's tick moves its data dir's mirror forward to the database head (HeadFile.follow):
    entries another server wrote, once followed, cannot be cut unnoticed from this data dir.
    It never moves back and never overwrites this server's batch in flight."""
    data = DataDir(tmp_path / "data")
    init_server(data, PASSPHRASE)
    store = storage.Store(data.load_config().db_url)
    bar = barrier.Barrier()
    try:
        with store.exclusive() as tx:  # another server's entries 3-5, not mirrored here
            bar.open_with(tx, barrier.Unlock(PASSPHRASE), 1)
            aw = audit.AuditWriter(tx, *audit.checkpoint(tx), bar.audit_key())
            for i in range(3):
                aw.append("other-server", "deposit.put", f"k{i}", "ok")
            aw.flush()
        with store.snapshot() as tx:
            head = audit.checkpoint(tx)
        assert data.head_file.follow(*head) and data.head_file.read() == Mirror(*head)
        assert not data.head_file.follow(2, os.urandom(32))  # never back
        data.head_file.begin(head, (6, os.urandom(32)))  # this server's batch in flight
        assert not data.head_file.follow(7, os.urandom(32))
        data.head_file.advance(*head, force=True)
        _truncate_to(store, 2)
        with store.snapshot() as tx:
            result = audit.verify(tx, bar.audit_key(), data.head_file)
        assert not result.ok and "truncated" in result.reason, result
    finally:
        store.dispose()
