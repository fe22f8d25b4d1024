"""Shared TLS helpers of the server tests (``test_tls.py``, ``test_fuzz_rest.py``): throwaway
certificates made with ``cryptography`` and ``bnc-serve`` over HTTPS.

* :func:`make_certs` - a CA, a server certificate for 127.0.0.1/::1/localhost, a client CA and a
  client certificate, a second CA that signed nothing the server trusts (and its client), a key
  that matches nothing and the server key under a password; ``{role: file name}``.
* :class:`TlsServer` - :class:`serve_support.ServerProcess` with ``--tls-cert``/``--tls-key``
  (and ``--tls-client-ca``): its readiness wait and ``request`` speak HTTPS.

``cryptography`` is the 'test' extra: skip first (``pytest.importorskip("cryptography.x509")``),
then ``import tls_support``.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

import serve_support as ss
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


# -- throwaway certificates --------------------------------------------------------------------
def new_key():
    return ec.generate_private_key(ec.SECP256R1())  # P-256: milliseconds, unlike RSA


def make_cert(subject: str, key, issuer=None, issuer_key=None, *, ca=False, server=False):
    """A certificate for ``subject`` signed by ``issuer`` (self-signed without one)."""
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    signer = issuer_key or key
    builder = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False
    )
    if ca:
        usage = dict.fromkeys(
            ("digital_signature", "content_commitment", "key_encipherment", "data_encipherment", "key_agreement"), False
        )
        builder = builder.add_extension(
            x509.KeyUsage(**usage, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True,
        )
    elif server:
        hosts = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        hosts.append(x509.IPAddress(ipaddress.ip_address("::1")))
        builder = builder.add_extension(x509.SubjectAlternativeName(hosts), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(signer, hashes.SHA256())


def write_pem(folder: Path, name: str, cert=None, key=None, password: bytes | None = None) -> str:
    """Write ``cert`` (or else ``key``, encrypted under ``password`` when given) as PEM; the file name."""
    path = folder / name
    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    else:
        encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
    return str(path)


def make_certs(folder) -> dict[str, str]:
    """Certificates and keys written into ``folder`` (created); file names: ``ca``,
    ``server_cert``/``server_key`` (signed by ``ca``), ``client_ca``, ``client_cert``/``client_key``
    (signed by ``client_ca``), ``other_ca`` and ``stranger_cert``/``stranger_key`` (signed by
    ``other_ca``), ``wrong_key`` (matches nothing), ``encrypted_key`` (the server key under a password)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    ca_key, client_ca_key, other_key = new_key(), new_key(), new_key()
    ca = make_cert("bnc test CA", ca_key, ca=True)
    client_ca = make_cert("bnc test client CA", client_ca_key, ca=True)
    other_ca = make_cert("bnc other CA", other_key, ca=True)
    for name, cert in (("ca", ca), ("client_ca", client_ca), ("other_ca", other_ca)):
        out[name] = write_pem(folder, f"{name}.pem", cert=cert)
    for name, issuer, issuer_key, server in (
        ("server", ca, ca_key, True),
        ("client", client_ca, client_ca_key, False),
        ("stranger", other_ca, other_key, False),
    ):
        key = new_key()
        cert = make_cert(name, key, issuer, issuer_key, server=server)
        out[f"{name}_cert"] = write_pem(folder, f"{name}.pem", cert=cert)
        out[f"{name}_key"] = write_pem(folder, f"{name}.key", key=key)
        if server:
            out["encrypted_key"] = write_pem(folder, "encrypted.key", key=key, password=b"secret-password")
    out["wrong_key"] = write_pem(folder, "wrong.key", key=new_key())
    return out


# -- the server over HTTPS -------------------------------------------------------------------------
class TlsServer(ss.ServerProcess):
    """``bnc-serve`` with ``--tls-cert``/``--tls-key`` (and ``--tls-client-ca`` when ``mutual``):
    the readiness wait and ``request`` speak HTTPS through ``context``, the client's
    ``ssl.SSLContext`` (trusts ``ca``; presents the client certificate when ``mutual``); ``tls`` is
    the tritonclient driver's option."""

    def __init__(self, repository, certs: dict[str, str], *, mutual: bool, args=(), **kwargs) -> None:
        self.context = ssl.create_default_context(cafile=certs["ca"])
        self.tls = {"ca": certs["ca"], "cert": None, "key": None}
        flags = ["--tls-cert", certs["server_cert"], "--tls-key", certs["server_key"]]
        if mutual:
            flags += ["--tls-client-ca", certs["client_ca"]]
            self.context.load_cert_chain(certs["client_cert"], certs["client_key"])
            self.tls.update(cert=certs["client_cert"], key=certs["client_key"])
        super().__init__(repository, args=[*flags, *args], **kwargs)  # waits and requests over HTTPS
