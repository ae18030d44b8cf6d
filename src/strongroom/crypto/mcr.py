"""Tang's McCallum-Relyea exchange on P-521, and the JOSE pieces Tang speaks (JWK, RFC 7638
thumbprints, the JWS of an advertisement): docs/FORMAT.md §4, "tang".

Point arithmetic (addition, scalar multiplication of any point) is the ``ecdsa`` package's
(python-ecdsa, which validates every point it is given against the curve); ECDSA signatures and
their checks are pyca/cryptography's.  Every point that arrives from outside is checked to be on
the curve and not the point at infinity before it is used.

Binding (the client, once): the server's exchange key S; a random c; C = c·G is kept, K = c·S is
the shared secret.  Recovery: a random e; the client sends X = C + e·G; the server answers
Y = s·X; the client computes K = Y − e·S.  The server never sees K, and a recorded exchange is
useless without e.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from ecdsa.curves import NIST521p
from ecdsa.ellipticcurve import INFINITY, Point, PointJacobi

from strongroom.crypto.identity import b64u, unb64u

CURVE = NIST521p.curve
G = NIST521p.generator
ORDER = NIST521p.order
SIZE = 66  # bytes of a P-521 coordinate or scalar
MAX_JWS = 64 << 10


class TangError(ValueError):
    """A malformed or unverifiable JWK, JWS or exchange; the message says which."""


def random_scalar() -> int:
    return int(secrets.randbelow(ORDER - 1)) + 1


def scalar_from_seed(seed: bytes, purpose: str) -> int:
    """A private scalar from a 32-byte secret seed (64 extra bits, then reduced: FIPS 186-5
    A.2.1's method), so a Tang key needs only a 256-bit secret kept by the barrier."""
    wide = HKDF(hashes.SHA512(), SIZE + 8, None, f"strongroom tang {purpose} v1".encode()).derive(seed)
    return int(int.from_bytes(wide, "big") % (ORDER - 1)) + 1


def _int(text: Any) -> int:
    raw = unb64u(text) if isinstance(text, str) else b""
    if len(raw) != SIZE:
        raise TangError("a P-521 coordinate is 66 bytes")
    return int.from_bytes(raw, "big")


def point_from_jwk(jwk: Any) -> Point:
    """A P-521 point from a JWK, checked to be on the curve and finite."""
    if not isinstance(jwk, dict) or jwk.get("kty") != "EC" or jwk.get("crv") != "P-521":
        raise TangError("not a P-521 EC JWK")
    x, y = _int(jwk.get("x")), _int(jwk.get("y"))
    if not CURVE.contains_point(x, y):  # checked here, not by an assert that -O would drop
        raise TangError("the JWK's point is not on P-521")
    return Point(CURVE, x, y, ORDER)


def jwk_from_point(p: Point | PointJacobi, **extra: Any) -> dict[str, Any]:
    if p == INFINITY:
        raise TangError("the point at infinity")
    x, y = int(p.x()), int(p.y())
    return {"kty": "EC", "crv": "P-521", "x": b64u(x.to_bytes(SIZE, "big")), "y": b64u(y.to_bytes(SIZE, "big")), **extra}


def public_point(scalar: int) -> Point:
    p = G * scalar
    return Point(CURVE, int(p.x()), int(p.y()), ORDER)


def thumbprint(jwk: dict[str, Any], alg: str = "S256") -> str:
    """RFC 7638: the hash of the required members, sorted, without whitespace."""
    canonical = json.dumps({k: jwk[k] for k in ("crv", "kty", "x", "y")}, sort_keys=True, separators=(",", ":"))
    h = {"S256": hashlib.sha256, "S1": hashlib.sha1}[alg]
    return b64u(h(canonical.encode()).digest())


def exchange(scalar: int, x: Point) -> Point:
    """The server's half of a recovery: Y = s·X."""
    y = x * scalar
    if y == INFINITY:
        raise TangError("the exchange gave the point at infinity")
    return Point(CURVE, int(y.x()), int(y.y()), ORDER)


def _negate(p: Point | PointJacobi) -> Point:
    return Point(CURVE, int(p.x()), (-int(p.y())) % CURVE.p(), ORDER)


def bind(server_exchange: Point) -> tuple[dict[str, Any], bytes]:
    """(C as a JWK, K's x coordinate): what a binding keeps, and its secret."""
    c = random_scalar()
    k = server_exchange * c
    return jwk_from_point(G * c), int(k.x()).to_bytes(SIZE, "big")


def recovery_request(client_public: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(e, X = C + e·G as a JWK) for one recovery."""
    e = random_scalar()
    x = point_from_jwk(client_public) + G * e
    return e, jwk_from_point(x)


def recovery_finish(answer: Any, e: int, server_exchange: Point) -> bytes:
    """K's x coordinate from the server's answer Y: K = Y − e·S."""
    y = point_from_jwk(answer)
    k = y + _negate(server_exchange * e)
    if k == INFINITY:
        raise TangError("the server's answer gives the point at infinity")
    return int(k.x()).to_bytes(SIZE, "big")


def derive_key(secret_x: bytes, context: bytes) -> bytes:
    """A 256-bit key from a shared point's x coordinate."""
    return HKDF(hashes.SHA256(), 32, None, b"strongroom tang binding v1\0" + context).derive(secret_x)


# -- advertisements ----------------------------------------------------------------------------
def sign_advertisement(keys: list[dict[str, Any]], signers: list[int]) -> bytes:
    """A JWS in the general JSON serialization, as tangd serves at /adv: the JWK set of the
    advertised public keys, signed ES512 by each signing key."""
    payload = b64u(json.dumps({"keys": keys}, sort_keys=True, separators=(",", ":")).encode())
    protected = b64u(json.dumps({"alg": "ES512", "cty": "jwk-set+json"}, separators=(",", ":")).encode())
    signatures = []
    for scalar in signers:
        der = ec.derive_private_key(scalar, ec.SECP521R1()).sign(f"{protected}.{payload}".encode(), ec.ECDSA(hashes.SHA512()))
        r, s = decode_dss_signature(der)
        signatures.append({"protected": protected, "signature": b64u(r.to_bytes(SIZE, "big") + s.to_bytes(SIZE, "big"))})
    return json.dumps({"payload": payload, "signatures": signatures}, separators=(",", ":")).encode()


def verify_advertisement(body: bytes) -> list[dict[str, Any]]:
    """The keys of an advertisement whose every signature verifies under one of its own
    verify keys (and at least one does); TangError otherwise."""
    if len(body) > MAX_JWS:
        raise TangError("the advertisement is too large")
    try:
        jws = json.loads(body)
        payload_b64 = jws["payload"]
        keys = json.loads(unb64u(payload_b64))["keys"]
        signatures = jws.get("signatures") or [{"protected": jws["protected"], "signature": jws["signature"]}]
    except (ValueError, KeyError, TypeError) as e:
        raise TangError(f"the advertisement is not a JWS of a key set ({type(e).__name__})") from None
    if not isinstance(keys, list) or not all(isinstance(k, dict) for k in keys):
        raise TangError("the advertisement's payload is not a key set")
    verifiers = [k for k in keys if "verify" in (k.get("key_ops") or [])]
    if not verifiers or not signatures:
        raise TangError("the advertisement names no signing key or carries no signature")
    for sig in signatures:
        try:
            raw = unb64u(sig["signature"])
            header = json.loads(unb64u(sig["protected"]))
        except (ValueError, KeyError, TypeError):
            raise TangError("a signature of the advertisement is malformed") from None
        if header.get("alg") != "ES512" or len(raw) != 2 * SIZE:
            raise TangError("an advertisement signature that is not ES512")
        der = encode_dss_signature(int.from_bytes(raw[:SIZE], "big"), int.from_bytes(raw[SIZE:], "big"))
        message = f"{sig['protected']}.{payload_b64}".encode()
        if not any(_verifies(k, der, message) for k in verifiers):
            raise TangError("the advertisement's signature does not verify")
    return keys


def _verifies(jwk: dict[str, Any], der: bytes, message: bytes) -> bool:
    try:
        p = point_from_jwk(jwk)
        key = ec.EllipticCurvePublicNumbers(int(p.x()), int(p.y()), ec.SECP521R1()).public_key()
        key.verify(der, message, ec.ECDSA(hashes.SHA512()))
        return True
    except (TangError, InvalidSignature, ValueError):
        return False
