"""Tang key sources (docs/FORMAT.md §4, "tang"): a volume unlocked with no person and no key
server policy while the host can reach its Tang servers, as clevis does for LUKS.

Binding makes a random source key and gives each of n Tang servers a payload sealed under a key
only that server can help recover (McCallum-Relyea, crypto/mcr.py): the source key itself when
one server suffices (threshold 1), else one SLIP-39 share of it (threshold t of n,
crypto/shares.py).  Unlocking asks the servers in order until t payloads open.  Each server's
advertisement is checked at binding: its signature, and its signing key against the thumbprints
given (or trusted as first seen, when told to).
"""

from __future__ import annotations

import json
import os
import ssl
from typing import Any

import httpx

from strongroom.crypto import aead, mcr, shares
from strongroom.crypto.identity import b64u, unb64u

TIMEOUT = 10.0
MAX_ANSWER = 64 << 10


class TangFailure(Exception):
    """A binding or an unlock that could not be done; the message names the server and why."""


def _client() -> httpx.Client:
    # the system's trust store (and SSL_CERT_FILE), not certifi's: a Tang server is often private
    return httpx.Client(verify=ssl.create_default_context(), timeout=TIMEOUT, follow_redirects=False)


def _get(url: str) -> bytes:
    try:
        with _client() as c, c.stream("GET", url) as r:
            body = b"".join(_bounded(r))
    except httpx.HTTPError as e:
        raise TangFailure(f"{url}: unreachable ({type(e).__name__})") from None
    if r.status_code != 200:
        raise TangFailure(f"{url}: answered {r.status_code}")
    return body


def _bounded(r: httpx.Response) -> list[bytes]:
    out, size = [], 0
    for chunk in r.iter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER:
            raise TangFailure(f"{r.url}: the answer is over {MAX_ANSWER >> 10} KiB")
        out.append(chunk)
    return out


def advertisement(url: str) -> list[dict[str, Any]]:
    """A Tang server's verified key set."""
    try:
        return mcr.verify_advertisement(_get(url.rstrip("/") + "/adv"))
    except mcr.TangError as e:
        raise TangFailure(f"{url}: {e}") from None


def _payload_aad(volume_id: bytes, index: int) -> bytes:
    return b"strongroom tang payload v1\0" + volume_id + index.to_bytes(2, "big")


def bind(
    urls: list[str], threshold: int, volume_id: bytes, thumbprints: list[str] | None, trust: bool
) -> tuple[bytes, list[dict[str, Any]]]:
    """(the source key, the servers' entries) of a new tang key source."""
    if not urls or not 1 <= threshold <= len(urls) or len(urls) > shares.MAX_SHARES:
        raise TangFailure(f"need 1 <= threshold <= Tang servers <= {shares.MAX_SHARES}")
    if not thumbprints and not trust:
        raise TangFailure("say which Tang signing keys to trust (--tang-thumbprint) or trust what they advertise (--tang-trust)")
    source_key = os.urandom(32)
    if threshold == 1:
        payloads = [source_key] * len(urls)
    else:
        payloads = [s.encode() for s in shares.split(source_key, len(urls), threshold)]
    servers = []
    for index, (url, payload) in enumerate(zip(urls, payloads, strict=True)):
        keys = advertisement(url)
        signing = {mcr.thumbprint(k) for k in keys if "verify" in (k.get("key_ops") or [])}
        if thumbprints and not signing & set(thumbprints):
            raise TangFailure(f"{url}: its signing keys ({', '.join(sorted(signing))}) are not among the thumbprints given")
        exchange = [k for k in keys if "deriveKey" in (k.get("key_ops") or []) and k.get("alg") == "ECMR"]
        if len(exchange) != 1:
            raise TangFailure(f"{url}: the advertisement has {len(exchange)} exchange keys, not one")
        epk, secret = mcr.bind(mcr.point_from_jwk(exchange[0]))
        key = mcr.derive_key(secret, volume_id)
        public = {k: exchange[0][k] for k in ("kty", "crv", "x", "y")}
        servers.append(
            {
                "url": url,
                "kid": mcr.thumbprint(public),
                "exchange": public,
                "epk": epk,
                "sealed": b64u(aead.seal(key, payload, _payload_aad(volume_id, index))),
            }
        )
    return source_key, servers


def _recover_one(server: dict[str, Any], volume_id: bytes, index: int) -> bytes:
    url = str(server["url"]).rstrip("/")
    e, x = mcr.recovery_request(server["epk"])
    try:
        with _client() as c:
            r = c.post(f"{url}/rec/{server['kid']}", content=json.dumps(x), headers={"Content-Type": "application/jwk+json"})
    except httpx.HTTPError as err:
        raise TangFailure(f"{url}: unreachable ({type(err).__name__})") from None
    if r.status_code == 404:
        raise TangFailure(f"{url}: no longer has the exchange key {server['kid']} (rotated away?)")
    if r.status_code != 200 or len(r.content) > MAX_ANSWER:
        raise TangFailure(f"{url}: answered {r.status_code}")
    try:
        secret = mcr.recovery_finish(r.json(), e, mcr.point_from_jwk(server["exchange"]))
        key = mcr.derive_key(secret, volume_id)
        return aead.open_(key, unb64u(server["sealed"]), _payload_aad(volume_id, index))
    except (ValueError, mcr.TangError, aead.DecryptionError):
        raise TangFailure(f"{url}: its answer does not open this volume's binding") from None


def recover(source: dict[str, Any], volume_id: bytes) -> bytes:
    """The source key, from ``threshold`` of the source's Tang servers."""
    threshold, servers = int(source["threshold"]), list(source["servers"])
    got: list[bytes] = []
    failures: list[str] = []
    for index, server in enumerate(servers):
        if len(got) >= threshold:
            break
        try:
            got.append(_recover_one(server, volume_id, index))
        except TangFailure as e:
            failures.append(str(e))
    if len(got) < threshold:
        raise TangFailure(f"{len(got)} of the {threshold} Tang servers needed answered: " + "; ".join(failures))
    if threshold == 1:
        return got[0]
    try:
        return shares.combine([g.decode() for g in got])
    except (UnicodeDecodeError, shares.ShareError) as e:
        raise TangFailure(f"the Tang shares do not combine: {e}") from None
