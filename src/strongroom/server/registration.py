"""Registration: a host joins an organization with the organization's auth secret and its own
public key (made on the host).  Failed attempts are counted per source address in the database,
so every worker and every server on it sees one count."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from typing import Any

from strongroom.crypto.identity import unb64u
from strongroom.server import audit as audit_mod
from strongroom.server import repository as repo
from strongroom.server.errors import BadRequest, Conflict, Refused, TooMany, Unauthorized
from strongroom.server.identities import CLIENT_NAME_RE, SHORT_NAME_RE, check_name, new_client_id, new_secret, secret_hash
from strongroom.server.storage import INTEGRITY_ERRORS, Tx

REGISTER_FAILURES_PER_MINUTE = 10
REGISTER_WINDOW_SECONDS = 60


class Registration:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock

    def check(self, org: str, name: str, public_key: str, source: str) -> bytes:
        """What a registration is checked for before the database: names, the key's form.
        Returns the public key's bytes."""
        check_name(org, "organization name", SHORT_NAME_RE)
        check_name(name, "client name", CLIENT_NAME_RE)
        try:
            pub = unb64u(public_key)
        except ValueError:
            raise BadRequest("public_key must be base64url") from None
        if len(pub) != 32:
            raise BadRequest("public_key must be a 32-byte Ed25519 public key")
        return pub

    def action(
        self, org: str, digest: bytes, name: str, pub: bytes, source: str
    ) -> Callable[[Tx, audit_mod.AuditWriter], dict[str, Any]]:
        """The registration's transaction; ``digest`` is ``secret_hash`` of the auth secret given,
        so the secret itself goes no further than the process that received it."""

        addr = source[:64]

        def run(tx: Tx, aw: audit_mod.AuditWriter) -> dict[str, Any]:
            # Counted in the database: every worker and every server on it sees the same count.
            now = self.clock()
            if repo.registration_failures(tx, addr, now - REGISTER_WINDOW_SECONDS) >= REGISTER_FAILURES_PER_MINUTE:
                raise TooMany("too many failed registrations from this address; wait a minute")
            row = repo.org_secret(tx, org)
            expected = row[1] if row is not None else secret_hash(new_secret())
            if not hmac.compare_digest(expected, digest) or row is None:
                aw.append("anonymous", "register", org, "denied", source=source, reason="wrong organization or auth secret")
                repo.record_registration_failure(tx, addr, now, now - REGISTER_WINDOW_SECONDS)
                raise Refused(Unauthorized("wrong organization or auth secret"))
            client_id = new_client_id()
            try:
                with tx.savepoint():
                    repo.insert_client(tx, client_id, row[0], name, pub, "client", self.clock())
            except INTEGRITY_ERRORS:
                raise Conflict("this public key is already registered") from None
            aw.append(client_id, "register", org, "ok", name=name, source=source)
            return {"client_id": client_id, "org": org, "name": name}

        return run
