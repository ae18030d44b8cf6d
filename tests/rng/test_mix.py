"""The server's entropy mixing: the construction checked against its definition, a mixer that
falls back to getrandom alone when the hardware fails, and a real server that mixes rdrand."""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from strongroom.rng import mix, monitor
from strongroom.rng.sources import open_source
from strongroom.rng.stats import ent_stats
from tests.rng.test_sources import HAS_RDRAND
from tests.serverproc import Deployment, cli, tls


def _reference(os_bytes: bytes, hw: bytes, n: int) -> bytes:
    """RFC 5869 HKDF-SHA256 (no salt: HashLen zeros) by hand, then AES-256 on counter blocks 0, 1, ..."""
    prk = hmac.new(bytes(32), os_bytes + hw, hashlib.sha256).digest()
    key = hmac.new(prk, b"strongroom entropy mix v1" + b"\x01", hashlib.sha256).digest()
    ecb = Cipher(algorithms.AES(key), modes.ECB()).encryptor()  # noqa: S305 - CTR by hand
    blocks = b"".join(ecb.update(i.to_bytes(16, "big")) for i in range(-(-n // 16)))
    return blocks[:n]


def test_mix_is_the_documented_construction() -> None:
    a, b = os.urandom(32), os.urandom(32)
    for n in (1, 16, 1000, 65536):
        assert mix.mix(a, b, n) == _reference(a, b, n)
    assert mix.mix(a, b, 64) != mix.mix(a, os.urandom(32), 64)  # both inputs count
    assert mix.mix(a, b, 64) != mix.mix(os.urandom(32), b, 64)


def test_no_mix_is_plain_getrandom() -> None:
    m = mix.EntropyMixer(None)
    assert len(m.random(100)) == 100 and m.status()["mixed"] == 0 and m.status()["unmixed"] == 0


@pytest.mark.skipif(not HAS_RDRAND, reason="this CPU has no RDRAND")
def test_rdrand_mixer_mixes_once_its_buffer_fills() -> None:
    m = mix.EntropyMixer("rdrand")
    m.random(32)
    deadline = time.monotonic() + 10
    while m.status()["mixed"] == 0 and time.monotonic() < deadline:
        m.random(32)
        time.sleep(0.01)
    assert m.status()["mixed"] > 0 and m.status()["in_use"]
    out = b"".join(m.random(4096) for _ in range(100))
    assert ent_stats(out).entropy > 7.99


def test_failed_hardware_falls_back_to_getrandom_and_says_so(tmp_path: Path) -> None:
    stuck = tmp_path / "stuck"
    stuck.write_bytes(bytes(100_000))
    m = mix.EntropyMixer(f"hwrng:{stuck}")
    m.random(16)
    deadline = time.monotonic() + 10
    while m.status()["error"] is None and time.monotonic() < deadline:
        time.sleep(0.01)
    out = b"".join(m.random(1000) for _ in range(200))
    st = m.status()
    assert st["mixed"] == 0 and st["unmixed"] == 201 and not st["in_use"] and "SP 800-90B" in str(st["error"])
    assert ent_stats(out).entropy > 7.99


@pytest.mark.skipif(not HAS_RDRAND, reason="this CPU has no RDRAND")
def test_server_mixes_rdrand_into_its_entropy_service(tmp_path: Path) -> None:
    d = Deployment(tmp_path, None)
    try:
        r = cli("server", "set-entropy-mix", "lava", "--data", str(d.data.path))
        assert r.returncode == 1 and b"rdrand, rdseed, hwrng" in r.stderr
        r = cli("server", "set-entropy-mix", "rdrand", "--data", str(d.data.path), "--json")
        assert r.returncode == 0, r.stderr
        assert d.data.load_config().entropy_mix == "rdrand"
        d.start()
        c = d.register()
        got = [c.entropy(1000) for _ in range(50)]
        assert len(set(got)) == 50 and all(len(x) == 1000 for x in got)
        m = httpx.get(d.url + "/metrics", verify=tls(d.data.ca_file)).text
        mixed = float(m.split("\nstrongroom_entropy_mixed ")[1].split()[0])
        unmixed = float(m.split("\nstrongroom_entropy_unmixed ")[1].split()[0])
        assert mixed + unmixed == 50 and mixed >= 40  # only the first requests may beat the buffer
        assert "strongroom_entropy_mix_in_use 1.0" in m

        # the remote source: this server's entropy service, through a client profile, under test
        d.register("rng-host")
        remote = monitor.TestedSource(open_source("remote", d.root / "profiles" / "rng-host"))
        assert len(remote.read(100_000)) == 100_000 and remote.in_use
        assert remote.status()["bytes_tested"] >= 100_000
    finally:
        d.close()
