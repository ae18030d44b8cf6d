"""The key server as a Tang server (docs/API.md, "Tang"): ``GET /tang/adv``, ``GET
/tang/adv/{kid}``, ``POST /tang/rec/{kid}``, as tangd answers them, so that clevis (and
``strongroom fs init --tang``) bind a volume to this server and unlock it with no person and no
deposit policy while the host can reach it.

Keys: each generation is a 256-bit seed kept by the barrier (system key ``tang-N``; meta
``tang_gen`` names the advertised one) from which an ES512 signing key and an ECMR exchange key
are derived (crypto/mcr.py).  ``server tang rotate`` makes a new generation; older ones still
answer recoveries for the bindings made with them but are no longer advertised.  Every recovery
is audited (actor ``tang``, the exchange key's thumbprint, the source address); the server never
learns the bound secret.  Sealed, the server answers 503 like every keyed route.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strongroom.crypto import mcr
from strongroom.server import barrier as barrier_mod
from strongroom.server import repository as repo
from strongroom.server.audit import AuditWriter
from strongroom.server.ctx import Ctx
from strongroom.server.errors import BadRequest, NotFound, Refused
from strongroom.server.storage import Tx

PREFIX = "tang-"
MAX_KID = 100


@dataclass(frozen=True)
class TangKeys:
    generation: int
    sign: int
    exchange: int
    sign_jwk: dict[str, Any]
    exchange_jwk: dict[str, Any]

    @classmethod
    def from_seed(cls, generation: int, seed: bytes) -> TangKeys:
        s = mcr.scalar_from_seed(seed, "sign")
        x = mcr.scalar_from_seed(seed, "exchange")
        sign_jwk = mcr.jwk_from_point(mcr.public_point(s), alg="ES512", key_ops=["verify"])
        exchange_jwk = mcr.jwk_from_point(mcr.public_point(x), alg="ECMR", key_ops=["deriveKey"])
        return cls(generation, s, x, sign_jwk, exchange_jwk)

    def kids(self, jwk: dict[str, Any]) -> set[str]:
        return {mcr.thumbprint(jwk, "S256"), mcr.thumbprint(jwk, "S1")}


class Tang:
    def __init__(self, barrier: barrier_mod.Barrier) -> None:
        self.barrier = barrier
        self._cache: dict[tuple[int, bytes], TangKeys] = {}  # deriving a generation costs ~0.1 s
        self._lock = threading.Lock()

    def _generation(self, tx: Tx, gen: int, create: bool = False) -> TangKeys | None:
        seed = self.barrier.system_secret(tx, f"{PREFIX}{gen}", create)
        if seed is None:
            return None
        with self._lock:
            keys = self._cache.get((gen, seed))
            if keys is None:
                keys = self._cache[(gen, seed)] = TangKeys.from_seed(gen, seed)
            return keys

    def _current(self, tx: Tx) -> TangKeys:
        gen = int(repo.get_meta(tx, "tang_gen") or "0")
        if gen == 0:
            gen = 1
            repo.set_meta(tx, "tang_gen", "1")
        keys = self._generation(tx, gen, create=True)
        assert keys is not None
        return keys

    def _all(self, tx: Tx) -> list[TangKeys]:
        current = self._current(tx)
        gens = sorted({int(n.removeprefix(PREFIX)) for n in self.barrier.system_secret_names(tx, PREFIX)})
        return [current, *(k for g in gens if g != current.generation and (k := self._generation(tx, g)) is not None)]

    def advertisement(self, tx: Tx, kid: str | None) -> bytes:
        """The current generation's keys, signed by its signing key (or by the signing key
        ``kid`` names, of any generation: how a client trusts a rotation)."""
        current = self._current(tx)
        signer = current
        if kid is not None:
            found = [k for k in self._all(tx) if kid in k.kids(k.sign_jwk)]
            if not found:
                raise NotFound("no signing key with that thumbprint")
            signer = found[0]
        return mcr.sign_advertisement([current.exchange_jwk, current.sign_jwk], [signer.sign])

    def recover(self, tx: Tx, aw: AuditWriter, kid: str, jwk: dict[str, Any], source: str) -> dict[str, Any]:
        found = [k for k in self._all(tx) if kid in k.kids(k.exchange_jwk)] if len(kid) <= MAX_KID else []
        if not found:
            aw.append("tang", "tang.recover", kid[:MAX_KID], "denied", reason="no such exchange key", source=source)
            raise Refused(NotFound("no exchange key with that thumbprint"))
        try:
            y = mcr.exchange(found[0].exchange, mcr.point_from_jwk(jwk))
        except mcr.TangError as e:
            aw.append("tang", "tang.recover", kid, "denied", reason=str(e), source=source)
            raise Refused(BadRequest(str(e))) from None
        aw.append("tang", "tang.recover", kid, "ok", generation=found[0].generation, source=source)
        return mcr.jwk_from_point(y, alg="ECMR", key_ops=["deriveKey"])

    def rotate(self, ctx: Ctx) -> dict[str, Any]:
        current = self._current(ctx.tx)
        gen = current.generation + 1
        fresh = self._generation(ctx.tx, gen, create=True)
        assert fresh is not None
        repo.set_meta(ctx.tx, "tang_gen", str(gen))
        ctx.audit.append(ctx.client.id, "tang.rotate", "", "ok", generation=gen)
        return {"generation": gen, "exchange_kid": mcr.thumbprint(fresh.exchange_jwk), "sign_kid": mcr.thumbprint(fresh.sign_jwk)}

    def action(self, kind: str, kid: str | None, body: str, source: str) -> Callable[[Tx, AuditWriter], Any]:
        """The group-commit action of an unauthenticated Tang request."""

        def run(tx: Tx, aw: AuditWriter) -> Any:
            if kind == "adv":
                return self.advertisement(tx, kid)
            try:
                jwk = json.loads(body)
            except ValueError:
                raise BadRequest("the body is not a JWK") from None
            return self.recover(tx, aw, kid or "", jwk, source)

        return run
