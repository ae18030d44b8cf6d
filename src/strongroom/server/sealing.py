"""The seal state: unsealing (in the worker that received it) with the passphrase, with shares
given one at a time by several admins (unsealing.py), or by the HSM at a sealed process's tick;
sealing; the master key's rotation.  Refusals made while sealed are held for the next unseal to
chain into the audit log."""

from __future__ import annotations

import hmac
import json
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, NoReturn, TypeVar

from strongroom.crypto import shares
from strongroom.server import audit as audit_mod
from strongroom.server import barrier as barrier_mod
from strongroom.server import repository as repo
from strongroom.server import schema
from strongroom.server import storage as st
from strongroom.server.auth import Authenticator
from strongroom.server.ctx import Ctx
from strongroom.server.errors import ApiError, BadRequest, Conflict, Denied, Refused, Sealed, StorageUnavailable, Unavailable
from strongroom.server.hsm import HsmError
from strongroom.server.nodes import NodeAgent
from strongroom.server.request import SignedRequest
from strongroom.server.sealconfig import AUTO_KINDS, SealConfig
from strongroom.server.storage import Tx
from strongroom.server.unsealing import DuplicateShare, ShareCollector
from strongroom.server.unsealing import progress as live_progress

log = logging.getLogger("strongroom.server")
T = TypeVar("T")
HSM_RETRY_MAX = 60.0


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
        self._hsm_next = 0.0
        self._hsm_delay = 1.0
        self._hold_logged = False
        self.hsm: barrier_mod.HsmLike | None = None  # the data dir's HSM or transit seal (service.py)
        self.auto_unseal = True  # ask the HSM while sealed (one process per server does)
        self.rekeying = Rekeying(self)

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
        repo.set_meta(ctx.tx, "seal_hold", "1")  # an HSM or transit seal does not undo an admin's seal
        repo.delete_grants(ctx.tx)
        ctx.audit.append(ctx.client.id, "seal", "", "ok", epoch=epoch)
        return {"sealed": True, "epoch": epoch}

    # -- unsealing ------------------------------------------------------------------------
    def _admin(self, req: SignedRequest) -> tuple[str, int, SealConfig]:
        """An admin authenticated without the audit key (it may be sealed away), the seal epoch
        and how the server is sealed."""
        checked = self.auth.verify_signature(req)  # before the write lock, as for every signed request
        try:
            with self.store.action() as (tx, _seq, _mac):
                client = self.auth.authenticate(tx, req.raw_path, _NullAudit(), checked)  # type: ignore[arg-type]
                if client.role != "admin":
                    raise Denied("unsealing needs the admin credential")
                return client.id, int(repo.get_meta(tx, "seal_epoch") or "1"), barrier_mod.seal_config(tx)
        except Refused as r:
            raise r.error from None
        except StorageUnavailable as e:
            raise Unavailable(f"database unavailable ({e})") from None

    def _refuse(self, actor: str, action: str, error: ApiError, reason: str) -> NoReturn:
        """Audit a refusal (held for the next unseal while sealed), then raise ``error``."""
        log.warning("%s refused: %s (client %s)", action, reason, actor)
        if self.barrier.sealed:
            self._hold_for_audit(actor, action, "denied", reason=reason)
            raise error

        def refuse(_tx: Tx, aw: audit_mod.AuditWriter) -> None:
            aw.append(actor, action, "", "denied", reason=reason)
            raise Refused(error)

        self._action(refuse)
        raise error  # not reached: the action raises

    def _record_unsealed(self, actor: str, epoch: int, how: str, **detail: Any) -> None:
        def record(tx: Tx, aw: audit_mod.AuditWriter) -> None:
            repo.set_meta(tx, "seal_hold", "")  # unsealed: an auto seal may unseal after the next restart again
            for ts, h_actor, action, outcome, held in repo.held_events(tx):
                aw.append(h_actor, action, "", outcome, while_sealed_at=ts, **json.loads(held))
            repo.clear_held_events(tx)
            aw.append(actor, "unseal", "", "ok", epoch=epoch, changed=True, by=how, **detail)

        self._action(record)

    def status(self, agent: NodeAgent | None = None) -> dict[str, Any]:
        """How the server is sealed and how far an unseal by shares has come."""
        with self.store.snapshot() as tx:
            config = barrier_mod.seal_config(tx)
            given = live_progress(tx, "unseal")
        return {
            "sealed": self.barrier.sealed,
            "seal": config.kind,
            "shares": config.shares,
            "threshold": config.threshold,
            "progress": given if self.barrier.sealed else 0,
        }

    def unseal(
        self,
        req: SignedRequest,
        agent: NodeAgent | None,
        passphrase: str | None = None,
        share: str | None = None,
        reset: bool = False,
        auto: bool = False,
    ) -> dict[str, Any]:
        """One of: the passphrase; one share towards the threshold; forget the shares given;
        let an HSM or transit seal unseal the server again after an admin sealed it."""
        actor, epoch, config = self._admin(req)
        if auto:
            if config.kind not in AUTO_KINDS:
                raise BadRequest(f"this server is unsealed with {config.describe()}: nothing unseals it by itself")
            with self.store.exclusive() as tx:
                repo.set_meta(tx, "seal_hold", "")
            self._hsm_next = 0.0
            if self.barrier.sealed:
                self._hold_for_audit(actor, "unseal.auto", "ok")
            return {**self.status(agent), "changed": False}
        if reset:
            with self.store.exclusive() as tx:
                if agent is not None:
                    ShareCollector(agent).reset(tx, "unseal")
            if self.barrier.sealed:
                self._hold_for_audit(actor, "unseal.reset", "ok")
            else:
                self._action(lambda tx, aw: aw.append(actor, "unseal.reset", "", "ok"))
            return {**self.status(agent), "changed": False}
        if passphrase is not None:
            return self._unseal_with(actor, epoch, config, barrier_mod.Unlock(passphrase=passphrase))
        assert share is not None
        if not config.shares:
            wrong_kind = BadRequest("this server is unsealed with a passphrase, not shares")
            self._refuse(actor, "unseal", wrong_kind, "share to a passphrase seal")
        if not self.barrier.sealed:
            return {**self.status(agent), "changed": False}
        if agent is None:
            raise Unavailable("this process cannot collect shares")
        try:
            info = shares.parse(share)
        except shares.ShareError as e:
            self._refuse(actor, "unseal", BadRequest(f"malformed share: {e}"), "malformed share")
        if info.identifier != config.identifier or info.threshold != config.threshold:
            other = Denied("this share is not one of this server's current shares")
            self._refuse(actor, "unseal", other, "share of another split")
        collector = ShareCollector(agent)
        try:
            with self.store.exclusive() as tx:
                progress = collector.add(tx, "unseal", info.index, info.text, actor)
                claimed = collector.claim(tx, "unseal", config.threshold) if progress >= config.threshold else None
        except DuplicateShare as e:
            self._refuse(actor, "unseal", BadRequest(str(e)), "duplicate share")
        log.info("unseal share %d of %d given (client %s)", progress, config.threshold, actor)
        if claimed is None:
            if self.barrier.sealed:
                self._hold_for_audit(actor, "unseal.share", "ok", progress=progress, threshold=config.threshold)
            return {**self.status(agent), "changed": False}
        return self._combine(actor, epoch, config, *claimed)

    def _combine(self, actor: str, epoch: int, config: SealConfig, texts: list[str], givers: list[str]) -> dict[str, Any]:
        return self._unseal_with(actor, epoch, config, barrier_mod.Unlock(shares=tuple(texts)), given_by=givers)

    def _unseal_with(
        self, actor: str, epoch: int, config: SealConfig, unlock: barrier_mod.Unlock, **detail: Any
    ) -> dict[str, Any]:
        """Unseal (or, unsealed already, prove the material) and audit it."""
        how = "shares" if unlock.shares else config.kind
        with self.store.exclusive() as tx:
            try:
                changed = self.barrier.unseal_or_check(tx, unlock, epoch)
            except barrier_mod.WrongPassphrase as e:
                error: ApiError | None = Denied(str(e))
                reason = str(e)
            except barrier_mod.NeedsMaterial as e:
                error, reason = BadRequest(str(e)), "not this server's kind of seal"
            except shares.ShareError as e:
                error, reason = Denied(str(e)), "shares do not combine"
            else:
                error, reason = None, ""
        if error is not None:
            self._refuse(actor, "unseal", error, reason)
        if not changed:
            self._action(lambda tx, aw: aw.append(actor, "unseal", "", "ok", epoch=epoch, changed=False))
            return {"sealed": False, "changed": False, "seal": config.kind}
        self._record_unsealed(actor, epoch, how, **detail)
        return {"sealed": False, "changed": True, "seal": config.kind}

    def _held(self) -> bool:
        with self.store.snapshot() as tx:
            return bool(repo.get_meta(tx, "seal_hold"))

    def when_sealed(self, agent: NodeAgent) -> None:
        """A sealed process's tick: combine shares given to other processes, or ask the HSM
        (after a failure, again after 1, 2, 4 ... 60 s)."""
        with self.store.exclusive() as tx:
            config = barrier_mod.seal_config(tx)
            epoch = int(repo.get_meta(tx, "seal_epoch") or "1")
            claimed = ShareCollector(agent).claim(tx, "unseal", config.threshold) if config.shares else None
        if claimed is not None:
            try:
                self._combine("shares", epoch, config, *claimed)
            except ApiError as e:
                log.error("the shares given do not unseal this server: %s", e)
            return
        if config.kind not in AUTO_KINDS or self.hsm is None or not self.auto_unseal or time.monotonic() < self._hsm_next:
            return
        if self._held():
            if not self._hold_logged:
                how = config.kind
                log.warning("sealed by an admin: the %s seal waits for 'strongroom server unseal --auto' (or shares)", how)
                self._hold_logged = True
            return
        self._hold_logged = False
        try:
            key_ok = self._unseal_with(config.kind, epoch, config, barrier_mod.Unlock(hsm=self.hsm))
        except (HsmError, ApiError) as e:
            self._hsm_next = time.monotonic() + self._hsm_delay
            delay = self._hsm_delay
            log.error("still sealed: the %s seal did not unseal the server (%s); trying again in %.0f s", config.kind, e, delay)
            self._hsm_delay = min(self._hsm_delay * 2, HSM_RETRY_MAX)
            return
        self._hsm_delay = 1.0
        if key_ok.get("changed"):
            log.warning("unsealed by the %s seal", config.kind)

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


class Rekeying:
    """New shares for the same master key, made once ``threshold`` current shares have been given
    (by one admin or several, to any process): started with the new counts, then share by share
    under the rekey's nonce; the last share's answer carries the new shares, once.  Deposits are
    not touched: only the master key's wrapping changes (barrier.reseal)."""

    def __init__(self, sealing: Sealing) -> None:
        self.s = sealing

    def _pending(self, tx: Tx) -> dict[str, Any] | None:
        raw = repo.get_meta(tx, "rekey_pending")
        return json.loads(raw) if raw else None

    def status(self, req: SignedRequest, agent: NodeAgent) -> dict[str, Any]:
        self.s._admin(req)
        with self.s.store.exclusive() as tx:
            pending = self._pending(tx)
            config = barrier_mod.seal_config(tx)
            progress = len(ShareCollector(agent).given(tx, "rekey")) if pending else 0
        if pending is None:
            return {"started": False, "progress": 0, "required": config.threshold}
        return {"started": True, **pending, "progress": progress, "required": config.threshold}

    def handle(self, req: SignedRequest, agent: NodeAgent, body: dict[str, Any]) -> dict[str, Any]:
        actor, _epoch, config = self.s._admin(req)
        if self.s.barrier.sealed:
            raise Sealed("the server is sealed: unseal it before a rekey")
        if body.get("cancel"):
            with self.s.store.exclusive() as tx:
                ShareCollector(agent).reset(tx, "rekey")
                repo.set_meta(tx, "rekey_pending", "")
            self.s._action(lambda tx, aw: aw.append(actor, "rekey.cancel", "", "ok"))
            return {"started": False}
        if not config.shares:
            how = config.describe()
            raise BadRequest(f"this server is unsealed with {how}: migrate the seal to shares (server migrate-seal)")
        if body.get("share") is None:
            return self._start(actor, agent, config, int(body["shares"]), int(body["threshold"]))
        return self._give(actor, agent, config, str(body.get("nonce", "")), str(body["share"]))

    def _start(self, actor: str, agent: NodeAgent, config: SealConfig, n: int, m: int) -> dict[str, Any]:
        try:
            shares.check_counts(n, m)
        except shares.ShareError as e:
            raise BadRequest(str(e)) from None
        nonce = uuid.uuid4().hex
        with self.s.store.exclusive() as tx:
            if self._pending(tx) is not None:
                raise Conflict("a rekey is in progress: finish it or cancel it first")
            ShareCollector(agent).reset(tx, "rekey")
            pending = {"nonce": nonce, "shares": n, "threshold": m, "started_by": actor, "started": self.s.clock()}
            repo.set_meta(tx, "rekey_pending", json.dumps(pending))
        self.s._action(lambda tx, aw: aw.append(actor, "rekey.start", "", "ok", shares=n, threshold=m))
        return {"started": True, **pending, "progress": 0, "required": config.threshold}

    def _give(self, actor: str, agent: NodeAgent, config: SealConfig, nonce: str, text: str) -> dict[str, Any]:
        try:
            info = shares.parse(text)
        except shares.ShareError as e:
            self.s._refuse(actor, "rekey", BadRequest(f"malformed share: {e}"), "malformed share")
        if info.identifier != config.identifier:
            other = Denied("this share is not one of this server's current shares")
            self.s._refuse(actor, "rekey", other, "share of another split")
        collector = ShareCollector(agent)
        with self.s.store.exclusive() as tx:
            pending = self._pending(tx)
            if pending is None or not hmac.compare_digest(pending["nonce"], nonce):
                raise BadRequest("no rekey with that nonce is in progress")
            try:
                progress = collector.add(tx, "rekey", info.index, info.text, actor)
            except DuplicateShare as e:
                raise BadRequest(str(e)) from None
            texts = collector.take(tx, "rekey", config.threshold) if progress >= config.threshold else None
        if texts is None:
            self.s._action(lambda tx, aw: aw.append(actor, "rekey.share", "", "ok", progress=progress))
            return {"started": True, **pending, "progress": progress, "required": config.threshold, "complete": False}
        return self._finish(actor, agent, pending, texts)

    def _finish(self, actor: str, agent: NodeAgent, pending: dict[str, Any], texts: list[str]) -> dict[str, Any]:
        n, m = int(pending["shares"]), int(pending["threshold"])

        def rekey(tx: Tx, aw: audit_mod.AuditWriter) -> list[str]:
            now = self._pending(tx)  # two last shares given at once to two processes: one finishes
            if now is None or not hmac.compare_digest(now["nonce"], pending["nonce"]):
                raise BadRequest("this rekey has finished already")
            ShareCollector(agent).reset(tx, "rekey")
            repo.set_meta(tx, "rekey_pending", "")
            if not self.s.barrier.proves(tx, barrier_mod.Unlock(shares=tuple(texts))):
                aw.append(actor, "rekey", "", "denied", reason="the shares given do not open this server")
                raise Refused(Denied("the shares given do not open this server; the rekey is cancelled"))
            hsm = self.s.hsm if barrier_mod.seal_config(tx).kind in AUTO_KINDS else None
            config = barrier_mod.seal_config(tx)
            made = self.s.barrier.reseal(tx, barrier_mod.Unlock(hsm=hsm), n, m, config.wrap_key)
            aw.append(actor, "rekey", "", "ok", shares=n, threshold=m)
            return made

        try:
            made = self.s._action(rekey)
        except HsmError as e:
            raise Unavailable(f"the seal's key holder could not wrap the new key: {e}") from None
        return {"started": False, "complete": True, "shares": made, "threshold": m}
