"""The request-signing string of docs/API.md ("Authentication"), shared by client and server."""

from __future__ import annotations

import hashlib

SCHEME = "STRONGROOM-ED25519-V1"
HEADER_CLIENT = "x-strongroom-client"
HEADER_TIME = "x-strongroom-timestamp"
HEADER_NONCE = "x-strongroom-nonce"
HEADER_SIG = "x-strongroom-signature"
MAX_SKEW_SECONDS = 300


def string_to_sign(method: str, raw_path: str, raw_query: str, body: bytes, timestamp: str, nonce: str, client_id: str) -> bytes:
    return "\n".join(
        [
            SCHEME,
            method.upper(),
            raw_path,
            raw_query,
            hashlib.sha256(body).hexdigest(),
            timestamp,
            nonce,
            client_id,
        ]
    ).encode()
