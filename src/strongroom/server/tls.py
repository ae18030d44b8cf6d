"""A private CA and the server's TLS certificate (ECDSA P-256), and the server's SSL context."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _write_private(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.touch(mode=0o600, exist_ok=False)
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _san_entry(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _server_cert(
    ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, key: ec.EllipticCurvePrivateKey, names: list[str], days: int
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([_san_entry(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def create(tls_dir: Path, names: list[str]) -> None:
    """Write ca.pem, ca-key.pem, server.pem and server-key.pem into tls_dir."""
    tls_dir.mkdir(mode=0o700, parents=True, exist_ok=False)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Strongroom server CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _server_cert(ca_key, ca_name, key, names, 825)
    (tls_dir / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_private(tls_dir / "ca-key.pem", ca_key)
    (tls_dir / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(tls_dir / "server-key.pem", key)


def renew(tls_dir: Path, names: list[str] | None = None, days: int = 825) -> x509.Certificate:
    """A new server key and certificate from the CA (the current certificate's names unless
    ``names``), put in place key first, each by rename, so a reader never sees a half file; a
    running server picks it up (tlsreload.py)."""
    ca_key = serialization.load_pem_private_key((tls_dir / "ca-key.pem").read_bytes(), password=None)
    ca = x509.load_pem_x509_certificate((tls_dir / "ca.pem").read_bytes())
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    if names is None:
        current = x509.load_pem_x509_certificate((tls_dir / "server.pem").read_bytes())
        san = current.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n.value) for n in san]
    if not names:
        raise ValueError("a server certificate needs at least one name")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _server_cert(ca_key, ca.subject, key, names, days)
    tmp_key, tmp_cert = tls_dir / "server-key.pem.new", tls_dir / "server.pem.new"
    tmp_key.unlink(missing_ok=True)
    _write_private(tmp_key, key)
    tmp_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    for p in (tmp_key, tmp_cert):
        with open(p, "rb") as f:
            os.fsync(f.fileno())
    os.replace(tmp_key, tls_dir / "server-key.pem")
    os.replace(tmp_cert, tls_dir / "server.pem")
    return cert


def server_context(tls_dir: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(tls_dir / "server.pem", tls_dir / "server-key.pem")
    # TLS 1.2 only with forward-secret AEAD suites; 1.3 suites are all fine and preferred.
    ctx.set_ciphers("ECDHE+AESGCM:ECDHE+CHACHA20")
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    return ctx


def sign_client(tls_dir: Path, name: str, public_key: Any, days: int) -> x509.Certificate:
    """A TLS client certificate from this CA naming ``name``, for ``public_key``."""
    ca_key = serialization.load_pem_private_key((tls_dir / "ca-key.pem").read_bytes(), password=None)
    ca = x509.load_pem_x509_certificate((tls_dir / "ca.pem").read_bytes())
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def client_certificate(tls_dir: Path, name: str) -> tuple[Path, Path]:
    """A TLS client certificate signed by this CA, its key made here (for peers that insist on
    one, e.g. PyKMIP's server, and the tests)."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = sign_client(tls_dir, name, key.public_key(), 30)
    cert_path, key_path = tls_dir / f"{name}.pem", tls_dir / f"{name}-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(key_path, key)
    return cert_path, key_path
