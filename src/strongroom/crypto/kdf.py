"""Key derivation: Argon2id for passphrases, HKDF-SHA256 for subkeys."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.argon2 import Argon2id
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

# The parameters any stored config or seal may ask for (FORMAT.md §1): outside them it is
# refused before any work, so a tampered file cannot make an unlock take gigabytes or hours.
MEMORY_KIB_MAX = 1 << 20  # 1 GiB: 16x the default
ITERATIONS_MAX = 16  # with the most memory, tens of seconds at worst
LANES_MAX = 16
SALT_BYTES = (8, 64)
# The least memory a new seal is made with, and (format version 5 on) that a volume config may
# name: below it, a GPU guesses passphrases cheaply.
MEMORY_KIB_FLOOR = 8192


class KdfParamsError(ValueError):
    """Argon2id parameters outside the documented bounds."""


def _whole(value: object, what: str, low: int, high: int) -> int:
    # A JSON integer only: int() would take "٣" or " 3", and bool is an int subclass.
    if type(value) is not int or not low <= value <= high:
        raise KdfParamsError(f"Argon2id {what} must be a whole number from {low} to {high}, not {value!r}")
    return value


@dataclass(frozen=True)
class Argon2Params:
    """Argon2id cost parameters, stored next to whatever they protect; checked against the bounds
    above whenever made (KdfParamsError)."""

    salt: bytes
    memory_kib: int = 65536
    iterations: int = 3
    lanes: int = 4

    def __post_init__(self) -> None:
        if not isinstance(self.salt, bytes) or not SALT_BYTES[0] <= len(self.salt) <= SALT_BYTES[1]:
            raise KdfParamsError(f"Argon2id salt must be {SALT_BYTES[0]} to {SALT_BYTES[1]} bytes")
        lanes = _whole(self.lanes, "lanes", 1, LANES_MAX)
        _whole(self.iterations, "iterations", 1, ITERATIONS_MAX)
        _whole(self.memory_kib, "memory (KiB)", 8 * lanes, MEMORY_KIB_MAX)

    @classmethod
    def fresh(cls, memory_kib: int | None = None, iterations: int | None = None) -> Argon2Params:
        # STRONGROOM_ARGON2_MEMORY_KIB lets test suites use cheaper parameters;
        # the chosen values are always stored, so a volume never depends on the env.
        mem = memory_kib or int(os.environ.get("STRONGROOM_ARGON2_MEMORY_KIB", "65536"))
        its = iterations or int(os.environ.get("STRONGROOM_ARGON2_ITERATIONS", "3"))
        if mem < MEMORY_KIB_FLOOR or its < 1:
            raise ValueError(f"Argon2id parameters too weak (at least {MEMORY_KIB_FLOOR} KiB and 1 pass)")
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
                memory_kib=d["memory_kib"],  # type: ignore[arg-type]  # checked in __post_init__
                iterations=d["iterations"],  # type: ignore[arg-type]
                lanes=d["lanes"],  # type: ignore[arg-type]
            )
        except KdfParamsError:
            raise
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
