"""A KMIP client certificate for this host: its key made here, a certificate request signed by
it, sent over the client's signed API request, and the files a KMIP client is given written out
(the key 0600), each replaced whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from strongroom import durable
from strongroom.client.client import Client

KEY, CERT, CA = "client-key.pem", "client.pem", "ca.pem"


def issue(client: Client, out_dir: Path, key_type: str = "ec", days: int = 365) -> dict[str, Any]:
    """The server's answer ({"client_id", "certificate", "ca", "not_after"}); the files are in
    ``out_dir``. StrongroomError from the server, OSError from the files."""
    key: Any = ec.generate_private_key(ec.SECP256R1()) if key_type == "ec" else rsa.generate_private_key(65537, 3072)
    # the server names the certificate after the client; the request's subject is not used
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kmip")])
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    out = client.kmip_certificate(csr.public_bytes(serialization.Encoding.PEM).decode(), days)
    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    # each file new and renamed into place: a symlink or FIFO already at a name is replaced, never
    # followed or opened, and a crash leaves each file whole (the old one or the new one)
    durable.replace_file(out_dir / KEY, pem, 0o600)
    durable.replace_file(out_dir / CERT, out["certificate"].encode(), 0o644)
    durable.replace_file(out_dir / CA, out["ca"].encode(), 0o644)
    return out


def files(out_dir: Path) -> tuple[Path, Path, Path]:
    """(certificate, key, CA) as ``issue`` wrote them."""
    return out_dir / CERT, out_dir / KEY, out_dir / CA
