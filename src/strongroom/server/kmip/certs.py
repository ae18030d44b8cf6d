"""KMIP client certificates: issued by the server's CA to a registered client for a key made on
its host (the client sends a certificate request, signed by that key, over its signed API
request), and read back from a TLS peer.  The certificate names the client by its id; the
client's status is read at every request, so disabling or revoking the client stops its KMIP
access at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from strongroom.server import tls
from strongroom.server.ctx import Ctx
from strongroom.server.errors import BadRequest, Refused
from strongroom.server.identities import CLIENT_ID_RE

MAX_DAYS = 825
MAX_CSR = 16 * 1024
_CURVES = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)


def issue(tls_dir: Path, ctx: Ctx, csr_pem: str, days: int) -> dict[str, Any]:
    me = ctx.client
    try:
        if len(csr_pem) > MAX_CSR:
            raise ValueError("the certificate request is too large")
        csr = x509.load_pem_x509_csr(csr_pem.encode())
        if not csr.is_signature_valid:
            raise ValueError("the certificate request's signature does not hold")
        key = csr.public_key()
        if isinstance(key, rsa.RSAPublicKey):
            if key.key_size < 2048:
                raise ValueError("RSA keys must have at least 2048 bits")
        elif not (isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, _CURVES)):
            raise ValueError("the key must be ECDSA P-256, P-384, P-521 or RSA")
        if not 1 <= days <= MAX_DAYS:
            raise ValueError(f"days must be 1 to {MAX_DAYS}")
    except ValueError as e:
        ctx.audit.append(me.id, "kmip.cert", f"client:{me.id}", "denied", reason=str(e)[:200])
        raise Refused(BadRequest(str(e))) from None
    cert = tls.sign_client(tls_dir, me.id, key, days)
    ca_pem = (tls_dir / "ca.pem").read_bytes()
    ctx.audit.append(me.id, "kmip.cert", f"client:{me.id}", "ok", serial=format(cert.serial_number, "x"), days=days)
    return {
        "client_id": me.id,
        "certificate": cert.public_bytes(serialization.Encoding.PEM).decode(),
        "ca": ca_pem.decode(),
        "not_after": cert.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def client_of(der: bytes | None) -> str | None:
    """The client id a verified peer certificate names (common name), if it was issued for TLS
    client authentication; None otherwise."""
    if not der:
        return None
    try:
        cert = x509.load_der_x509_certificate(der)
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    except (ValueError, x509.ExtensionNotFound):
        return None
    if ExtendedKeyUsageOID.CLIENT_AUTH not in eku or len(names) != 1:
        return None
    cn = names[0].value
    return cn if isinstance(cn, str) and CLIENT_ID_RE.match(cn) else None
