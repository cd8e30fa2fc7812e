"""A private CA and an HTTPS server on 127.0.0.1 for the ``ca_bundle`` tests (issue 26, class 7).

:func:`make_ca` writes a self-signed CA certificate (PEM) and returns it with its key;
:func:`serve` serves a directory over HTTPS on 127.0.0.1 (a free port, in a thread) with a
certificate for the IP 127.0.0.1 signed by the CA given; ``stop()`` in teardown ends it.
"""

from __future__ import annotations

import datetime as dt
import functools
import http.server
import ipaddress
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class CA:
    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    pem: Path  # the CA certificate, what a ca_bundle (or REQUESTS_CA_BUNDLE) names


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _validity(b: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc)
    return b.not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=2))


def make_ca(where: Path, name: str) -> CA:
    key = ec.generate_private_key(ec.SECP256R1())
    b = x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name)).public_key(key.public_key())
    b = _validity(b.serial_number(x509.random_serial_number()))
    b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                      key_encipherment=False, data_encipherment=False, key_agreement=False,
                                      encipher_only=False, decipher_only=False), critical=True)
    b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    cert = b.sign(key, hashes.SHA256())
    where.mkdir(parents=True, exist_ok=True)
    pem = where / f"{name}.pem"
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return CA(name, key, cert, pem)


def server_cert(ca: CA, where: Path) -> tuple[Path, Path]:
    """(certificate chain, key) PEM files of a server certificate for 127.0.0.1 signed by ``ca``."""
    key = ec.generate_private_key(ec.SECP256R1())
    b = x509.CertificateBuilder().subject_name(_name("127.0.0.1")).issuer_name(ca.cert.subject)
    b = _validity(b.public_key(key.public_key()).serial_number(x509.random_serial_number()))
    b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    b = b.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    b = b.add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    cert = b.sign(ca.key, hashes.SHA256())
    where.mkdir(parents=True, exist_ok=True)
    crt, k = where / f"server-by-{ca.name}.crt", where / f"server-by-{ca.name}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return crt, k


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@dataclass
class TlsServer:
    server: http.server.ThreadingHTTPServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}/"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def serve(root: Path, ca: CA, where: Path) -> TlsServer:
    """``root`` over HTTPS on 127.0.0.1, its certificate signed by ``ca``."""
    crt, key = server_cert(ca, where)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    root.mkdir(parents=True, exist_ok=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    server.daemon_threads = True
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return TlsServer(server, thread)
