"""What both APIs read from a request the same way: its body (bounded) and its signature headers.

One reader and one builder, so that the deposit API and the Vault API's signed login cannot
disagree on a body's limit or on which of two copies of a header counts: a signature header sent
twice is refused (each copy could be read by a different layer), never resolved.
"""

from __future__ import annotations

from dataclasses import dataclass

from strongroom.crypto import reqsig
from strongroom.server.asgi import Receive, Scope
from strongroom.server.errors import TooLarge, Unauthorized

# The Vault-compatible API's paths (vault/http.py); every other path is the deposit API's.
VAULT_PREFIXES = ("/v1/sys/", "/v1/secret/", "/v1/transit/", "/v1/auth/token/", "/v1/auth/strongroom/")
AUTH_HEADERS = (reqsig.HEADER_CLIENT, reqsig.HEADER_TIME, reqsig.HEADER_NONCE, reqsig.HEADER_SIG)
_AUTH = {h.encode(): h for h in AUTH_HEADERS}


@dataclass(frozen=True)
class SignedRequest:
    method: str
    raw_path: str
    raw_query: str
    body: bytes
    headers: dict[str, str]


def raw_path(scope: Scope) -> str:
    """The path as the client sent (and signed) it, still percent-encoded."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    return raw.decode("latin-1")


def signed_request(scope: Scope, body: bytes) -> SignedRequest:
    """The parts a request's signature covers; 401 if a signature header is given twice."""
    headers: dict[str, str] = {}
    for k, v in scope["headers"]:
        name = _AUTH.get(k)
        if name is not None:
            if name in headers:
                raise Unauthorized(f"the {name} header is given more than once")
            headers[name] = v.decode("latin-1")
    return SignedRequest(
        method=scope["method"],
        raw_path=raw_path(scope),
        raw_query=scope.get("query_string", b"").decode("latin-1"),
        body=body,
        headers=headers,
    )


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole body, refused with 413 before it is read if its declared length is over
    ``limit`` and as soon as it passes ``limit`` if it is streamed (chunked)."""
    framed = False  # the request says it has a body (a length or chunks); HTTP/1.1 has none otherwise
    for k, v in scope.get("headers", ()):
        if k == b"content-length":
            if not v.isdigit() or len(v) > 19 or int(v) > limit:
                raise TooLarge(f"request body over {limit} bytes")
            framed = True
        elif k == b"transfer-encoding":
            framed = True
    if not framed:
        return b""
    chunks, size = [], 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            break
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"request body over {limit} bytes")
        chunks.append(chunk)
        if not msg.get("more_body", False):
            break
    return b"".join(chunks)
