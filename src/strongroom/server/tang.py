"""The key server as a Tang server (docs/API.md, "Tang"): ``GET /tang/adv``, ``GET
/tang/adv/{kid}``, ``POST /tang/rec/{kid}``, as tangd answers them, so that clevis (and
``strongroom fs init --tang``) bind a volume to this server and unlock it with no person and no
deposit policy while the host can reach it.

Keys: each generation is a 256-bit seed kept by the barrier (system key ``tang-N``; meta
``tang_gen`` names the advertised one) from which an ES512 signing key and an ECMR exchange key
are derived (crypto/mcr.py).  ``server tang rotate`` makes a new generation; older ones still
answer recoveries for the bindings made with them but are no longer advertised.  Every recovery
is audited (actor ``tang``, the exchange key's thumbprint, the source address) before it is
answered; the server never learns the bound secret.  Sealed, the server answers 503 like every
keyed route.
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
from strongroom.server.errors import BadRequest, NotFound
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
    """The worker reads the keys (a snapshot) and does the point arithmetic, so no request of an
    unauthenticated client costs the writer more than an audit entry; the writer makes the
    first generation and records each recovery before it is answered."""

    def __init__(self, barrier: barrier_mod.Barrier) -> None:
        self.barrier = barrier
        self._cache: dict[tuple[int, bytes], TangKeys] = {}  # deriving a generation costs ~0.1 s
        self._adv: dict[tuple[int, int], bytes] = {}  # (advertised generation, signer) -> the signed advertisement
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

    def keys(self, tx: Tx) -> list[TangKeys] | None:
        """Every generation, the advertised one first; None before the first (read only)."""
        gen = int(repo.get_meta(tx, "tang_gen") or "0")
        current = self._generation(tx, gen) if gen else None
        if current is None:
            return None
        gens = sorted({int(n.removeprefix(PREFIX)) for n in self.barrier.system_secret_names(tx, PREFIX)})
        return [current, *(k for g in gens if g != gen and (k := self._generation(tx, g)) is not None)]

    def initialize(self, tx: Tx) -> None:
        """The first generation, if there is none (the writer, once)."""
        if not repo.get_meta(tx, "tang_gen"):
            self._generation(tx, 1, create=True)
            repo.set_meta(tx, "tang_gen", "1")

    def advertisement(self, keys: list[TangKeys], kid: str | None) -> bytes:
        """The advertised generation's keys, signed by its signing key (or by the signing key
        ``kid`` names, of any generation: how a client trusts a rotation)."""
        current, signer = keys[0], keys[0]
        if kid is not None:
            found = [k for k in keys if kid in k.kids(k.sign_jwk)]
            if not found:
                raise NotFound("no signing key with that thumbprint")
            signer = found[0]
        with self._lock:
            cached = self._adv.get((current.generation, signer.generation))
        if cached is None:
            cached = mcr.sign_advertisement([current.exchange_jwk, current.sign_jwk], [signer.sign])
            with self._lock:
                self._adv[(current.generation, signer.generation)] = cached
        return cached

    def exchange(self, keys: list[TangKeys], kid: str, jwk: Any) -> tuple[int, dict[str, Any]]:
        """(the key's generation, Y = s·X) for the exchange key ``kid``; NotFound or BadRequest."""
        found = [k for k in keys if kid in k.kids(k.exchange_jwk)] if len(kid) <= MAX_KID else []
        if not found:
            raise NotFound("no exchange key with that thumbprint")
        try:
            y = mcr.exchange(found[0].exchange, mcr.point_from_jwk(jwk))
        except mcr.TangError as e:
            raise BadRequest(str(e)) from None
        return found[0].generation, mcr.jwk_from_point(y, alg="ECMR", key_ops=["deriveKey"])

    def rotate(self, ctx: Ctx) -> dict[str, Any]:
        self.initialize(ctx.tx)
        gen = int(repo.get_meta(ctx.tx, "tang_gen") or "1") + 1
        fresh = self._generation(ctx.tx, gen, create=True)
        assert fresh is not None
        repo.set_meta(ctx.tx, "tang_gen", str(gen))
        ctx.audit.append(ctx.client.id, "tang.rotate", "", "ok", generation=gen)
        return {"generation": gen, "exchange_kid": mcr.thumbprint(fresh.exchange_jwk), "sign_kid": mcr.thumbprint(fresh.sign_jwk)}

    def action(self, kind: str, kid: str | None, body: str, source: str) -> Callable[[Tx, AuditWriter], Any]:
        """The writer's part of an unauthenticated Tang request: "init" (the first keys), or a
        recovery's audit entry (``body``: its JSON detail, outcome and reason)."""

        def run(tx: Tx, aw: AuditWriter) -> Any:
            if kind == "init":
                self.initialize(tx)
                return None
            detail = json.loads(body)
            outcome = str(detail.pop("outcome"))
            aw.append("tang", "tang.recover", (kid or "")[:MAX_KID], outcome, source=source, **detail)
            return None

        return run
