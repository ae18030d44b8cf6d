"""The seal state: unsealing with the passphrase (in the worker that received it), sealing,
and the master key's rotation; refusals made while sealed are held for the next unseal to
chain into the audit log."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from strongroom.server import audit as audit_mod
from strongroom.server import barrier as barrier_mod
from strongroom.server import repository as repo
from strongroom.server import schema
from strongroom.server import storage as st
from strongroom.server.auth import Authenticator
from strongroom.server.ctx import Ctx
from strongroom.server.errors import Denied, Refused, StorageUnavailable, Unavailable
from strongroom.server.request import SignedRequest
from strongroom.server.storage import Tx

log = logging.getLogger("strongroom.server")
T = TypeVar("T")


class Sealing:
    def __init__(
        self,
        store: st.Store,
        barrier: barrier_mod.Barrier,
        auth: Authenticator,
        submit: Callable[[Callable[[Tx, audit_mod.AuditWriter], Any]], Future[Any]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.barrier = barrier
        self.auth = auth
        self.submit = submit
        self.clock = clock

    def _action(self, fn: Callable[[Tx, audit_mod.AuditWriter], T]) -> T:
        result: T = self.submit(fn).result()
        return result

    def rotate_master_key(self, ctx: Ctx) -> dict[str, Any]:
        gen = self.barrier.rotate(ctx.tx)
        ctx.audit.append(ctx.client.id, "rotate-master-key", "", "ok", generation=gen)
        return {"generation": gen}

    def after_rotation(self) -> None:
        with self.store.exclusive() as tx:
            self.barrier.refresh(tx)

    def seal(self, ctx: Ctx) -> dict[str, Any]:
        epoch = int(repo.get_meta(ctx.tx, "seal_epoch") or "1") + 1
        repo.set_meta(ctx.tx, "seal_epoch", str(epoch))
        repo.delete_grants(ctx.tx)
        ctx.audit.append(ctx.client.id, "seal", "", "ok", epoch=epoch)
        return {"sealed": True, "epoch": epoch}

    def unseal(self, req: SignedRequest, passphrase: str) -> dict[str, Any]:
        """Authenticate an admin without the audit key, derive U, unseal, then audit."""
        checked = self.auth.verify_signature(req)  # before the write lock, as for every signed request
        try:
            with self.store.action() as (tx, _seq, _mac):
                client = self.auth.authenticate(tx, req.raw_path, _NullAudit(), checked)  # type: ignore[arg-type]
                if client.role != "admin":
                    raise Denied("unsealing needs the admin credential")
                epoch = int(repo.get_meta(tx, "seal_epoch") or "1")
        except Refused as r:
            raise r.error from None
        except StorageUnavailable as e:
            raise Unavailable(f"database unavailable ({e})") from None
        with self.store.exclusive() as tx:
            try:
                changed = self.barrier.unseal_or_check(tx, passphrase, epoch)
            except (barrier_mod.WrongPassphrase, ValueError):
                changed = None
        if changed is None:
            log.warning("unseal refused: wrong passphrase (client %s)", client.id)
            if self.barrier.sealed:  # no audit entry can be chained yet: held for the next unseal
                self._hold_for_audit(client.id, "unseal", "denied", reason="wrong passphrase")
                raise Denied("wrong passphrase")

            def refuse(_tx: Tx, aw: audit_mod.AuditWriter) -> None:
                aw.append(client.id, "unseal", "", "denied", reason="wrong passphrase")
                raise Refused(Denied("wrong passphrase"))

            self._action(refuse)
        if not changed:
            self._action(lambda tx, aw: aw.append(client.id, "unseal", "", "ok", epoch=epoch, changed=False))
            return {"sealed": False, "changed": False}

        def record(tx: Tx, aw: audit_mod.AuditWriter) -> None:
            for ts, actor, action, outcome, detail in repo.held_events(tx):
                aw.append(actor, action, "", outcome, while_sealed_at=ts, **json.loads(detail))
            repo.clear_held_events(tx)
            aw.append(client.id, "unseal", "", "ok", epoch=epoch, changed=True)

        self._action(record)
        return {"sealed": False, "changed": True}

    def _hold_for_audit(self, actor: str, action: str, outcome: str, **detail: Any) -> None:
        """Keep a refusal made while sealed for the next unseal to chain (bounded)."""
        try:
            with self.store.exclusive() as tx:
                if repo.count_held_events(tx) >= schema.MAX_SEALED_EVENTS:
                    held = schema.MAX_SEALED_EVENTS
                    log.warning("while sealed, a refusal was not kept for the audit log (%d already held)", held)
                    return
                repo.hold_event(
                    tx, self.clock(), actor, action, outcome, json.dumps(detail, separators=(",", ":"), sort_keys=True)
                )
        except StorageUnavailable as e:
            log.warning("while sealed, a refusal was not kept for the audit log: database unavailable (%s)", e)


class _NullAudit:
    """Stands in for the audit writer while sealed: nothing can be chained without the key."""

    def append(self, *args: Any, **kwargs: Any) -> None:
        log.warning("while sealed, an authentication refusal was not audited: %s", args[:4])
