"""Group commit: one writer thread per process runs queued actions in one transaction each batch.

Each action gets a savepoint, so a failed action is undone alone; a refused one (audited,
then answered with an error) keeps its audit entry.  One fsync then covers the whole batch,
and no request thread waits in the database's lock queue.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from strongroom.server import audit as audit_mod
from strongroom.server import barrier as barrier_mod
from strongroom.server import storage as st
from strongroom.server.errors import Refused, Sealed, StorageUnavailable, Unavailable
from strongroom.server.headfile import HeadFile
from strongroom.server.storage import Tx

log = logging.getLogger("strongroom.server.committer")

MAX_BATCH = 64
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

    def _drain(self, batch: list[tuple[Action, Future[Any]]]) -> None:
        while len(batch) < MAX_BATCH:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                return

    def _loop(self) -> None:
        while True:
            self.run_now([self._queue.get()])

    def run_now(self, batch: list[tuple[Action, Future[Any]]]) -> None:
        """Run one batch (plus whatever is queued) in the calling thread; every future ends up done."""
        try:
            self._run(batch)
        except BaseException as e:  # noqa: BLE001 - the caller's loop must survive anything
            log.error("group commit failed: %s", type(e).__name__)
            for _fn, fut in batch:
                if not fut.done():
                    fut.set_exception(Unavailable("the server could not complete the request"))

    def _run(self, batch: list[tuple[Action, Future[Any]]]) -> None:
        t0 = time.perf_counter()
        try:
            self._run_batch(batch)
        finally:
            self.stats.record(len(batch), time.perf_counter() - t0)

    def _run_batch(self, batch: list[tuple[Action, Future[Any]]]) -> None:
        try:
            key = self.barrier.audit_key()
        except barrier_mod.SealedError:
            for _fn, fut in batch:
                fut.set_exception(_sealed())
            return
        outcomes: list[tuple[Future[Any], bool, Any]] = []
        try:
            with self.store.action() as (tx, seq, mac):
                # Drain only now, holding the write lock: whatever queued while we waited for
                # the other process's commit joins this batch and shares its fsync.
                self._drain(batch)
                epoch = st.get_meta(tx, "seal_epoch")
                if epoch is not None and int(epoch) != self.barrier.epoch:
                    # Sealed through another process since our last tick: stop serving at once
                    # rather than at the next tick.
                    log.warning("sealed by another server process (epoch %s)", epoch)
                    self.barrier.seal()
                    for _fn, fut in batch:
                        fut.set_exception(_sealed())
                    return
                aw = audit_mod.AuditWriter(tx, seq, mac, key)
                for fn, fut in batch:
                    saved = (aw.seq, aw.mac)
                    try:
                        with tx.savepoint():
                            try:
                                outcomes.append((fut, True, fn(tx, aw)))
                            except Refused as r:  # audited refusal: keep its entry, answer the error
                                outcomes.append((fut, False, r.error))
                    except st.OUTAGE_ERRORS:
                        raise  # the whole batch fails as one; nothing was acknowledged
                    except barrier_mod.SealedError:
                        aw.seq, aw.mac = saved
                        outcomes.append((fut, False, _sealed()))
                    except Exception as e:  # noqa: BLE001 - this action alone is undone
                        aw.seq, aw.mac = saved
                        outcomes.append((fut, False, e))
                aw.flush()
        except StorageUnavailable as e:
            for _fn, fut in batch:
                fut.set_exception(Unavailable(f"database unavailable ({e})"))
            return
        try:
            self.head_file.advance(aw.seq, aw.mac)
        except OSError as e:  # committed already: answer the requests, report the lagging mirror
            log.error("could not update the audit head file: %s", e.strerror or type(e).__name__)
        for fut, ok, value in outcomes:  # answered only after the commit: acknowledged means durable
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)
