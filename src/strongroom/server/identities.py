"""Names and credentials the server hands out or checks: deposit, organization, group and client
names, client ids, and organization secrets (kept only as a hash)."""

from __future__ import annotations

import hashlib
import os
import re

from strongroom.crypto.identity import b64u
from strongroom.server.errors import BadRequest

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SHORT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
CLIENT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
CLIENT_ID_RE = re.compile(r"^c_[A-Za-z0-9_-]{16}$")


def check_name(name: str, what: str = "deposit name", pattern: re.Pattern[str] = NAME_RE) -> str:
    if not isinstance(name, str) or not pattern.match(name):
        raise BadRequest(f"bad {what}: use letters, digits, '.', '_' and '-', starting with a letter or digit")
    return name


def secret_hash(secret: str) -> bytes:
    # Auth secrets are 256-bit random strings, so a plain hash is enough to keep them
    # out of the database; no passphrase-grade stretching is needed.
    return hashlib.sha256(b"strongroom org secret v1\0" + secret.encode()).digest()


def new_secret() -> str:
    return b64u(os.urandom(32))


def new_client_id() -> str:
    return "c_" + b64u(os.urandom(12))
