"""The server certificate renewed without a restart: each worker reloads server.pem and
server-key.pem into its live SSL context when the certificate file changes (looked at every
two seconds) or on SIGHUP, which the supervisor passes on.  New connections get the new
certificate; connections already open keep theirs.  A pair that does not load (a key that does
not match, a half-written file) is logged and the old one kept.

Certificates within 30 days of expiry are warned about in the log (at start, then daily), and
every certificate in the TLS dir (the server's, the CA's, the client certificates issued from
it) is exported in /metrics with its expiry time.
"""

from __future__ import annotations

import datetime
import logging
import os
import ssl
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from strongroom.durable import read_regular

log = logging.getLogger("strongroom.server.tls")

WARN_DAYS = 30
PEM_MAX = 64 << 10  # a certificate chain or a key; a FIFO or a huge file here is refused, never waited on
WARN_EVERY = 86400.0


def expiry(path: Path) -> float | None:
    """A PEM certificate's notAfter as Unix time, or None if the file is not one."""
    try:
        cert = x509.load_pem_x509_certificate(read_regular(path, PEM_MAX))
    except (OSError, ValueError):
        return None
    return cert.not_valid_after_utc.timestamp()


def certificates(tls_dir: Path) -> dict[str, float]:
    """Name (file stem) -> expiry of every certificate in the TLS dir."""
    out = {}
    for p in sorted(tls_dir.glob("*.pem")):
        if p.stem.endswith("-key"):
            continue
        when = expiry(p)
        if when is not None:
            out[p.stem] = when
    return out


class Reloader:
    def __init__(self, ctx: ssl.SSLContext, tls_dir: Path) -> None:
        self.ctx = ctx
        self.tls_dir = tls_dir
        self._seen = self._stamp()
        self._warned = 0.0
        self._certs: tuple[tuple[int, int] | None, dict[str, float]] = (None, {})

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.tls_dir / "server.pem")
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def check(self, why: str = "the file changed") -> bool:
        """Reload if server.pem changed since the last load (always when ``why`` is a signal);
        True if a new pair is in use."""
        stamp = self._stamp()
        if why == "the file changed" and stamp == self._seen:
            self.warn()
            return False
        self._seen = stamp
        try:
            self._load()
        except (OSError, ssl.SSLError, ValueError, TypeError) as e:
            log.error("TLS certificate not reloaded (%s): %s; serving the previous one", why, e)
            return False
        log.warning("TLS certificate reloaded (%s)", why)
        self._warned = 0.0
        self.warn()
        return True

    def _load(self) -> None:
        """Both files read once, the pair checked, then loaded whole: a failed load part way
        would leave the live context with a certificate and a key that do not match."""
        cert_pem = read_regular(self.tls_dir / "server.pem", PEM_MAX)
        key_pem = read_regular(self.tls_dir / "server-key.pem", PEM_MAX)
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
        raw = serialization.PublicFormat.SubjectPublicKeyInfo
        if cert.public_key().public_bytes(serialization.Encoding.DER, raw) != key.public_key().public_bytes(
            serialization.Encoding.DER, raw
        ):
            raise ValueError("the key does not match the certificate")
        fd = os.memfd_create("strongroom-tls", os.MFD_CLOEXEC)  # the pair as one file, never on disk
        try:
            os.write(fd, cert_pem + b"\n" + key_pem)
            self.ctx.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)

    def warn(self) -> None:
        now = time.time()
        if now - self._warned < WARN_EVERY:
            return
        self._warned = now
        for name, when in self.expiries().items():
            days = (when - now) / 86400
            if days < WARN_DAYS:
                date = datetime.datetime.fromtimestamp(when, datetime.UTC).date().isoformat()
                state = "expired" if days < 0 else f"expires in {days:.0f} days"
                log.warning("TLS certificate %s.pem %s (%s): run 'strongroom server tls renew'", name, state, date)

    def expiries(self) -> dict[str, float]:
        """Every certificate's expiry, read again only when the directory changed."""
        try:
            st = os.stat(self.tls_dir)
            key: tuple[int, int] | None = (st.st_mtime_ns, self._seen[1] if self._seen else 0)
        except OSError:
            key = None
        if key is None or key != self._certs[0]:
            self._certs = (key, certificates(self.tls_dir))
        return self._certs[1]
