"""Who a request is from: a signed request's signature checked outside the write transaction
(CPU work that needs no lock), then, inside it, its nonce recorded and its client's status
read; the admin role where a route needs it."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TypeVar

from strongroom.crypto import reqsig
from strongroom.crypto.identity import unb64u, verify
from strongroom.server import audit as audit_mod
from strongroom.server import numbers
from strongroom.server import repository as repo
from strongroom.server import storage as st
from strongroom.server.ctx import Ctx
from strongroom.server.errors import Denied, Refused, StorageUnavailable, Unauthorized, Unavailable
from strongroom.server.identities import CLIENT_ID_RE
from strongroom.server.messages import Checked
from strongroom.server.repository import ClientRow
from strongroom.server.request import SignedRequest
from strongroom.server.storage import Tx

NONCE_RE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
T = TypeVar("T")


class Authenticator:
    def __init__(self, store: st.Store, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self._keys: dict[str, bytes] = {}

    def signed_action(
        self, raw_path: str, checked: Checked, fn: Callable[[Ctx], T], admin: bool = False
    ) -> Callable[[Tx, audit_mod.AuditWriter], T]:
        """The action for a request whose signature was checked: authenticate, then ``fn``."""

        def run(tx: Tx, aw: audit_mod.AuditWriter) -> T:
            client = self.authenticate(tx, raw_path, aw, checked)
            if admin and client.role != "admin":
                aw.append(client.id, "admin", raw_path, "denied", reason="not an admin")
                raise Refused(Denied("this operation needs the admin credential"))
            return fn(Ctx(tx, client, aw))

        return run

    def verify_signature(self, req: SignedRequest) -> Checked:
        """Check the signature outside the write transaction; returns (client id, nonce, timestamp).

        A client's public key never changes, so it is cached; its status is not, and is read
        inside the transaction by ``authenticate``.
        """
        h = req.headers
        client_id = h.get(reqsig.HEADER_CLIENT, "")
        ts = h.get(reqsig.HEADER_TIME, "")
        nonce = h.get(reqsig.HEADER_NONCE, "")
        sig = h.get(reqsig.HEADER_SIG, "")
        if not (client_id and ts and nonce and sig):
            raise Unauthorized("request is not signed (see docs/API.md, Authentication)")
        if not CLIENT_ID_RE.match(client_id) or not NONCE_RE.match(nonce) or numbers.whole(ts, max_len=12) is None:
            raise Unauthorized("malformed authentication headers")
        if abs(self.clock() - int(ts)) > reqsig.MAX_SKEW_SECONDS:
            raise Unauthorized("request timestamp is more than 5 minutes off the server's clock")
        try:
            signature = unb64u(sig)
        except ValueError:
            raise Unauthorized("malformed signature") from None
        public_key = self._public_key(client_id)
        message = reqsig.string_to_sign(req.method, req.raw_path, req.raw_query, req.body, ts, nonce, client_id)
        if public_key is None or not verify(public_key, signature, message):
            raise Unauthorized("unknown client or bad signature")
        return client_id, nonce, int(ts)

    def _public_key(self, client_id: str) -> bytes | None:
        key = self._keys.get(client_id)
        if key is None:
            try:
                with self.store.snapshot() as tx:
                    raw = repo.client_public_key(tx, client_id)
            except StorageUnavailable as e:
                raise Unavailable(f"database unavailable ({e})") from None
            if raw is None:
                return None
            if len(self._keys) > 100_000:
                self._keys.clear()
            key = self._keys[client_id] = raw
        return key

    def authenticate(self, tx: Tx, raw_path: str, aw: audit_mod.AuditWriter, checked: Checked) -> ClientRow:
        client_id, nonce, ts = checked
        client = repo.client(tx, client_id)
        if client is None:
            raise Unauthorized("unknown client or bad signature")
        if client.status != "active":
            aw.append(client.id, "auth", raw_path, "denied", reason=f"client is {client.status}")
            raise Refused(Denied(f"this client is {client.status}"))
        if not repo.record_nonce(tx, ts, nonce, client_id):
            raise Unauthorized("replayed request (nonce already used)")
        return client
