"""Key derivation: Argon2id for passphrases, HKDF-SHA256 for subkeys."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.argon2 import Argon2id
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


@dataclass(frozen=True)
class Argon2Params:
    """Argon2id cost parameters, stored next to whatever they protect."""

    salt: bytes
    memory_kib: int = 65536
    iterations: int = 3
    lanes: int = 4

    @classmethod
    def fresh(cls, memory_kib: int | None = None, iterations: int | None = None) -> Argon2Params:
        # STRONGROOM_ARGON2_MEMORY_KIB lets test suites use cheaper parameters;
        # the chosen values are always stored, so a volume never depends on the env.
        mem = memory_kib or int(os.environ.get("STRONGROOM_ARGON2_MEMORY_KIB", "65536"))
        its = iterations or int(os.environ.get("STRONGROOM_ARGON2_ITERATIONS", "3"))
        if mem < 8 * 4 or its < 1:
            raise ValueError("Argon2id parameters too weak")
        return cls(salt=os.urandom(16), memory_kib=mem, iterations=its)

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["salt"] = self.salt.hex()
        return d

    @classmethod
    def from_json(cls, d: dict[str, object]) -> Argon2Params:
        try:
            return cls(
                salt=bytes.fromhex(str(d["salt"])),
                memory_kib=int(d["memory_kib"]),  # type: ignore[call-overload]
                iterations=int(d["iterations"]),  # type: ignore[call-overload]
                lanes=int(d["lanes"]),  # type: ignore[call-overload]
            )
        except (KeyError, ValueError, TypeError) as e:
            raise ValueError(f"bad Argon2id parameters: {e}") from None


def passphrase_key(passphrase: str | bytes, params: Argon2Params) -> bytes:
    """Derive a 256-bit key from a passphrase with Argon2id."""
    secret = passphrase.encode() if isinstance(passphrase, str) else passphrase
    if not secret:
        raise ValueError("empty passphrase")
    return Argon2id(
        salt=params.salt,
        length=32,
        iterations=params.iterations,
        lanes=params.lanes,
        memory_cost=params.memory_kib,
    ).derive(secret)


def subkey(key: bytes, purpose: str, length: int = 32) -> bytes:
    """An independent key for one purpose, derived with HKDF-SHA256."""
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=purpose.encode()).derive(key)
