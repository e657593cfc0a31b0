"""A throw-away self-signed certificate, so the fake server can speak TLS (and HTTP/2 by ALPN).

mitmproxy speaks HTTP/2 to an upstream only over TLS, when ALPN picks ``h2``;
this certificate is what a test points mitmproxy (``ssl_verify_upstream_trusted_ca``)
or a client (``verify=``) at. It is its own CA: one file to trust.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["server_context", "write_certificate"]

#: Names every certificate covers; more can be added (a model host mapped to the fake server).
DEFAULT_HOSTNAMES = ("localhost", "127.0.0.1", "::1")


def write_certificate(directory: Path, hostnames: Iterable[str] = ()) -> tuple[Path, Path]:
    """Write ``cert.pem`` (self-signed, CA:true) and ``key.pem`` into ``directory``; return both paths."""
    names = list(dict.fromkeys([*DEFAULT_HOSTNAMES, *hostnames]))
    key = ec.generate_private_key(ec.SECP256R1())  # EC: generated in milliseconds, unlike RSA
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "flowproof fake model server")])
    alternative: list[x509.GeneralName] = []
    for name in names:
        try:
            alternative.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternative.append(x509.DNSName(name))
    # Back-dated a day: a client clock a little behind must not see a not-yet-valid certificate.
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=False, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def server_context(cert_file: Path, key_file: Path, *, http2: bool) -> ssl.SSLContext:
    """A server TLS context offering ``h2`` (when ``http2``) and ``http/1.1`` by ALPN."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    context.set_alpn_protocols(["h2", "http/1.1"] if http2 else ["http/1.1"])
    # No TLS 1.3 session ticket after the handshake: on 127.0.0.1 it lands while a threaded
    # client (the websockets sync client) writes its first request, which then goes missing
    # (docs/addon.md, "TLS 1.2 for agents, and why").
    context.num_tickets = 0
    return context
