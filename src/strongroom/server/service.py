"""The service: what every backend is built from (the store, the barrier, the group
committer, the clock, the entropy mixer) and the backends themselves, one module each: ``auth``
(auth.py), ``registration`` (registration.py), ``deposits`` (deposits.py), ``orgs`` (orgs.py:
the admin's organizations, clients and groups), ``sealing`` (sealing.py); the audit log's tail is
audit.py's, and entropy is drawn by the worker that answers (front.py).  Every action runs in one
group-commit transaction (committer.py): authenticate (nonce recorded), act, append the audit
entry, commit; refusals are audited and committed, then answered.  actions.py routes each
request's message to its backend's method.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from strongroom.rng.mix import EntropyMixer
from strongroom.server import audit as audit_mod
from strongroom.server import barrier as barrier_mod
from strongroom.server import repository as repo
from strongroom.server import storage as st
from strongroom.server.auth import Authenticator
from strongroom.server.committer import GroupCommitter
from strongroom.server.ctx import Ctx
from strongroom.server.datadir import DataDir, ServerConfig
from strongroom.server.deposits import Deposits
from strongroom.server.orgs import Orgs
from strongroom.server.registration import Registration
from strongroom.server.sealing import Sealing
from strongroom.server.storage import Tx
from strongroom.server.tang import Tang
from strongroom.server.transitseal import link_for

MAX_ENTROPY = 65536
T = TypeVar("T")


class Service:
    def __init__(
        self,
        store: st.Store,
        barrier: barrier_mod.Barrier,
        datadir: DataDir,
        config: ServerConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock  # Unix time: request windows, policy times, records (tests pass their own)
        self.store = store
        self.barrier = barrier
        self.datadir = datadir
        self.config = config
        self.head_file = datadir.head_file
        self.committer = GroupCommitter(store, barrier, self.head_file)
        self.entropy_mixer = EntropyMixer(config.entropy_mix)
        self.auth = Authenticator(store, clock)
        self.registration = Registration(clock)
        self.deposits = Deposits(barrier, config, clock)
        self.orgs = Orgs(clock)
        self.sealing = Sealing(store, barrier, self.auth, self.submit, clock)
        self.sealing.hsm = link_for(config)
        self.tang = Tang(barrier)

    def submit(self, fn: Callable[[Tx, audit_mod.AuditWriter], T]) -> Future[T]:
        """Queue an action for the next group commit; the future resolves after it committed."""
        return self.committer.submit(fn)

    def whoami(self, ctx: Ctx) -> dict[str, Any]:
        org = None
        if ctx.client.org_id is not None:
            org = repo.org_name(ctx.tx, ctx.client.org_id)
        return {"client_id": ctx.client.id, "name": ctx.client.name, "org": org, "role": ctx.client.role}
