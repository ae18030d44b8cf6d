"""Group commit: queued actions run as one batch in one transaction, answered only after it
committed.

A batch first runs without savepoints (the common case pays for none).  If an action fails
outside an audited refusal, the transaction is rolled back and the batch runs again with a
savepoint per action, so that action alone is undone; a refused action (audited, then answered
with an error) keeps its audit entry.  One flush then covers the whole batch.  The batch's audit
entries go in as one multi-row INSERT (in the guarded run, before each savepoint; and before a
read of the log), and the audit head file's line is written before the commit and made durable
by the commit's flush or beside it (headfile.py).  In a server the writer process
(writer.py) calls ``run_now`` with what every worker sent; a worker's own committer serves only
an unseal's audit entries.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from strongroom.server import audit as audit_mod
from strongroom.server import barrier as barrier_mod
from strongroom.server import repository as repo
from strongroom.server import storage as st
from strongroom.server.errors import Refused, Sealed, StorageUnavailable, Unavailable
from strongroom.server.headfile import HeadFile
from strongroom.server.storage import Tx

log = logging.getLogger("strongroom.server.committer")

MAX_BATCH = 64
# How long a committer waits for more work before settling the head file (headfile.py): short
# enough to bound what a crash can leave pending, long enough that steady traffic never pays it.
SETTLE_IDLE = 0.005
Action = Callable[[Tx, audit_mod.AuditWriter], Any]


class BatchStats:
    """Batches, actions and time in batches, for /metrics and for tuning."""

    def __init__(self) -> None:
        self.batches = 0
        self.actions = 0
        self.seconds = 0.0

    def record(self, actions: int, seconds: float) -> None:
        self.batches += 1
        self.actions += actions
        self.seconds += seconds


class Settle(Protocol):
    """Where a batch member's result goes: a Future for a caller in another thread, an Outcome
    for one in the committing thread."""

    def set_result(self, result: Any, /) -> None: ...
    def set_exception(self, exception: BaseException | None, /) -> None: ...
    def done(self) -> bool: ...


class Outcome:
    """A batch member's result for a caller in the committing thread (the writer process): what
    a Future holds, without the lock and condition a Future makes for waiters in other threads
    (both on every request's path)."""

    __slots__ = ("_value", "_error", "_done")

    def __init__(self) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = False

    def set_result(self, result: Any, /) -> None:
        self._value, self._done = result, True

    def set_exception(self, exception: BaseException | None, /) -> None:
        self._error, self._done = exception, True

    def done(self) -> bool:
        return self._done

    def exception(self) -> BaseException | None:
        if not self._done:
            raise RuntimeError("the batch has not run")
        return self._error

    def result(self) -> Any:
        if self.exception() is not None:
            raise self._error  # type: ignore[misc]
        return self._value


def _sealed() -> Sealed:
    return Sealed("the server is sealed; unseal it with 'strongroom server unseal'")


class GroupCommitter:
    def __init__(self, store: st.Store, barrier: barrier_mod.Barrier, head_file: HeadFile) -> None:
        self.store = store
        self.barrier = barrier
        self.head_file = head_file
        self._queue: queue.SimpleQueue[tuple[Action, Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.stats = BatchStats()
        self._flusher: ThreadPoolExecutor | None = None
        self._flusher_pid = 0
        self._unsettled: tuple[int, bytes] | None = None
        self._covered = False
        self._covered_pid = 0

    @property
    def unsettled(self) -> bool:
        """A committed batch's head is still written as pending: ``settle`` when idle."""
        return self._unsettled is not None

    def settle(self) -> None:
        """Drop the pending half of the head file once idle for SETTLE_IDLE seconds: a busy
        committer's next batch supersedes it anyway, and an idle one can spare the flush."""
        if self._unsettled is None:
            return
        seq, mac = self._unsettled
        self._unsettled = None
        try:
            self.head_file.settle(seq, mac)
        except OSError as e:
            log.error("could not settle the audit head file: %s", e.strerror or type(e).__name__)

    def _head_flusher(self) -> ThreadPoolExecutor:
        if self._flusher is None or self._flusher_pid != os.getpid():  # threads do not survive a fork
            self._flusher = ThreadPoolExecutor(1, thread_name_prefix="audit-head")
            self._flusher_pid = os.getpid()
        return self._flusher

    def submit(self, fn: Action) -> Future[Any]:
        fut: Future[Any] = Future()
        if self.barrier.sealed:
            fut.set_exception(_sealed())
            return fut
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:  # started lazily: never before the worker forks
                    self._thread = threading.Thread(target=self._loop, name="group-commit", daemon=True)
                    self._thread.start()
        self._queue.put((fn, fut))
        return fut

    def _mirror(self, before: tuple[int, bytes], after: tuple[int, bytes]) -> Future[None] | None:
        """Write the batch's pending head now, under the write lock.  Returns the flush to wait
        for after the commit, unless the commit's own flush covers the head file."""
        try:
            if self._covered_pid != os.getpid():
                self._covered = self.head_file.covered_by(self.store.database_file)
                self._covered_pid = os.getpid()
            self.head_file.begin(before, after)
        except OSError as e:
            log.error("could not update the audit head file: %s", e.strerror or type(e).__name__)
            return None
        if self._covered:
            done: Future[None] = Future()
            done.set_result(None)
            return done
        return self._head_flusher().submit(self.head_file.sync)  # runs while the database commits

    def _drain(self, batch: list[tuple[Action, Settle]]) -> None:
        while len(batch) < MAX_BATCH:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                return

    def _loop(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=SETTLE_IDLE if self._unsettled else None)
            except queue.Empty:
                self.settle()
                continue
            self.run_now([item])

    def run_now(self, batch: list[tuple[Action, Settle]]) -> None:
        """Run one batch (plus whatever is queued) in the calling thread; every future ends up done."""
        try:
            self._run(batch)
        except BaseException as e:  # noqa: BLE001 - the caller's loop must survive anything
            log.error("group commit failed: %s", type(e).__name__)
            for _fn, fut in batch:
                if not fut.done():
                    fut.set_exception(Unavailable("the server could not complete the request"))

    def _run(self, batch: list[tuple[Action, Settle]]) -> None:
        t0 = time.perf_counter()
        try:
            self._run_batch(batch)
        finally:
            self.stats.record(len(batch), time.perf_counter() - t0)

    def _run_batch(self, batch: list[tuple[Action, Settle]]) -> None:
        try:
            key = self.barrier.audit_key()
        except barrier_mod.SealedError:
            for _fn, fut in batch:
                fut.set_exception(_sealed())
            return
        try:
            try:
                done = self._attempt(batch, key, guarded=False)
            except _Undo:
                done = self._attempt(batch, key, guarded=True)
        except StorageUnavailable as e:
            for _fn, fut in batch:
                fut.set_exception(Unavailable(f"database unavailable ({e})"))
            return
        if done is None:
            return
        outcomes, after, synced = done
        if synced is not None:
            try:
                synced.result()
                self._unsettled = after
            except OSError as e:  # committed already: answer the requests, report the lagging mirror
                log.error("could not flush the audit head file: %s", e.strerror or type(e).__name__)
        for fut, ok, value in outcomes:  # answered only after the commit: acknowledged means durable
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)

    def _attempt(
        self, batch: list[tuple[Action, Settle]], key: bytes, guarded: bool
    ) -> tuple[list[tuple[Settle, bool, Any]], tuple[int, bytes], Future[None] | None] | None:
        """Run the batch in one transaction: (outcomes, chain head after, the head line's flush),
        or None if it found the server sealed.  Unguarded, actions run without savepoints (two
        statements each saved) and the first that fails outside a refusal undoes the whole
        transaction (_Undo): the caller runs the batch again guarded, each action in a savepoint,
        so the failed one is undone alone."""
        outcomes: list[tuple[Settle, bool, Any]] = []
        synced: Future[None] | None = None
        with self.store.action() as (tx, seq, mac):
            # Drain only now, holding the write lock: whatever queued while we waited for
            # the other process's commit joins this batch and shares its fsync.
            self._drain(batch)
            epoch = repo.get_meta(tx, "seal_epoch")
            if epoch is not None and int(epoch) != self.barrier.epoch:
                # Sealed through another process since our last tick: stop serving at once
                # rather than at the next tick.
                log.warning("sealed by another server process (epoch %s)", epoch)
                self.barrier.seal()
                for _fn, fut in batch:
                    fut.set_exception(_sealed())
                return None
            aw = audit_mod.AuditWriter(tx, seq, mac, key)
            for fn, fut in batch:
                if not guarded:
                    try:
                        outcomes.append((fut, True, fn(tx, aw)))
                    except Refused as r:  # audited refusal: keep its entry, answer the error
                        outcomes.append((fut, False, r.error))
                    except st.OUTAGE_ERRORS:
                        raise  # the whole batch fails as one; nothing was acknowledged
                    except Exception:  # noqa: BLE001 - undone with the rest, then run again guarded
                        raise _Undo() from None
                    continue
                aw.write_rows()  # a savepoint undone must not take earlier actions' entries along
                saved = aw.mark()
                try:
                    with tx.savepoint():
                        try:
                            outcomes.append((fut, True, fn(tx, aw)))
                        except Refused as r:
                            outcomes.append((fut, False, r.error))
                except st.OUTAGE_ERRORS:
                    raise
                except barrier_mod.SealedError:
                    aw.rewind(saved)
                    outcomes.append((fut, False, _sealed()))
                except Exception as e:  # noqa: BLE001 - this action alone is undone
                    aw.rewind(saved)
                    outcomes.append((fut, False, e))
            aw.flush()
            if aw.seq != seq:
                synced = self._mirror((seq, mac), (aw.seq, aw.mac))
        return outcomes, (aw.seq, aw.mac), synced


class _Undo(Exception):
    """An action failed outside a refusal in a batch run without savepoints."""
