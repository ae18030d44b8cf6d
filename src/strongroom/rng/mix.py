"""The server's entropy: getrandom(2), optionally mixed with a health-tested hardware source.

Mixing never replaces the OS CSPRNG and never waits for the hardware.  Per request:
    key = HKDF-SHA256(ikm = getrandom(32) || hw(32), salt = none, info = "strongroom entropy mix v1")
    out = AES-256-CTR(key, counter block 0) keystream, N bytes
so the output is at least as strong as getrandom's 256 bits alone (HKDF is a randomness
extractor over both inputs; AES-CTR under a fresh key is the CTR_DRBG generate step of
SP 800-90A).  A background thread keeps a buffer of hardware bytes that passed their tests;
each 32-byte piece is used once.  When the buffer is empty or the source is out of use, a
request gets getrandom alone and the `unmixed` count goes up.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from strongroom.rng.monitor import SourceOutOfUse, TestedSource
from strongroom.rng.sources import open_source

log = logging.getLogger("strongroom.rng.mix")

INFO = b"strongroom entropy mix v1"
PIECE = 32
BUFFER_HIGH = 64 * 1024  # hardware bytes kept ready
ZERO_COUNTER = bytes(16)


def mix(os_bytes: bytes, hw_bytes: bytes, n: int) -> bytes:
    """The construction above, for n output bytes (tests check it against its definition)."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=INFO).derive(os_bytes + hw_bytes)
    return Cipher(algorithms.AES(key), modes.CTR(ZERO_COUNTER)).encryptor().update(bytes(n))


class EntropyMixer:
    def __init__(self, spec: str | None) -> None:
        self.spec = spec
        self.mixed = 0
        self.unmixed = 0
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self._tested: TestedSource | None = None
        self._pid = -1
        self._error: str | None = None

    def random(self, n: int) -> bytes:
        if self.spec is None:
            return os.urandom(n)  # getrandom(2), looping until all n bytes are read
        self._ensure_thread()
        with self._lock:
            hw = bytes(self._buffer[:PIECE]) if len(self._buffer) >= PIECE else None
            del self._buffer[:PIECE]
        if hw is None:
            self.unmixed += 1
            return os.urandom(n)
        self.mixed += 1
        return mix(os.urandom(32), hw, n)

    def status(self) -> dict[str, object]:
        tested = self._tested
        return {
            "source": self.spec,
            "in_use": bool(tested and tested.in_use),
            "mixed": self.mixed,
            "unmixed": self.unmixed,
            "error": self._error,
        }

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:  # first use in this process (workers are forked: threads do not survive)
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._buffer.clear()
            threading.Thread(target=self._fill, name="entropy-mix", daemon=True).start()

    def _fill(self) -> None:
        assert self.spec is not None
        try:
            self._tested = TestedSource(open_source(self.spec))
        except Exception as e:  # noqa: BLE001 - reported in status and the log; requests go on unmixed
            self._error = str(e)
            log.error("entropy mixing disabled: %s", e)
            return
        tested = self._tested
        while True:
            if len(self._buffer) >= BUFFER_HIGH:
                time.sleep(0.05)
                continue
            try:
                data = tested.read(tested.source.read_size)
            except SourceOutOfUse as e:
                self._error = str(e)
                if e.fresh:
                    log.warning("entropy mixing paused: %s", e)
                time.sleep(max(0.05, (tested.retry_at or 0) - time.monotonic()))
                continue
            self._error = None
            with self._lock:
                self._buffer += data
