"""TLS for both front ends: the certificate files, checked once at start, and the plaintext rule.

::

    tls = load_tls("server.pem", "server.key", client_ca="clients-ca.pem")   # None without files
    uvicorn.Config(app, **tls.uvicorn_options())                             # REST: HTTPS
    grpc_server.start_grpc_server(repository, address, tls=tls)              # gRPC: TLS

:func:`load_tls` reads the server certificate (PEM, the chain if any), its private key (PEM,
unencrypted: the server starts unattended) and, for mutual TLS, the CA whose certificates clients
must present. It checks them with the standard library's ``ssl`` before any port opens, so a
missing or unreadable file, a file that is not PEM, an encrypted key or a key that does not match
the certificate is a :class:`~bnc_deploy.errors.ConfigError` naming the file (``bnc-serve``
exits 2), never a traceback from uvicorn or a gRPC port that silently fails to bind. The PEM bytes
are kept for gRPC (``grpc.ssl_server_credentials`` takes bytes); uvicorn reads the same files
again by path when it starts. Files are read once: a renewed certificate takes a restart.

:func:`check_plaintext` is the rule that keeps bearer tokens and model inputs off the network in
clear text: without TLS, every address must be loopback (``127.0.0.0/8``, ``::1``,
``localhost``) unless the operator says ``--insecure`` (TLS terminated by a proxy or service mesh
in front of the server).
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bnc_deploy.errors import ConfigError

#: The flags, named in the errors (the CLI's spelling; also the ``load_tls`` argument order).
CERT_FLAG, KEY_FLAG, CLIENT_CA_FLAG = "--tls-cert", "--tls-key", "--tls-client-ca"


@dataclass(frozen=True)
class TlsConfig:
    """Checked TLS files of one server: paths (uvicorn) and their PEM bytes (gRPC)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None
    cert_pem: bytes
    key_pem: bytes
    client_ca_pem: bytes | None

    @property
    def mutual(self) -> bool:
        """Whether clients must present a certificate signed by ``client_ca_file``."""
        return self.client_ca_file is not None

    def uvicorn_options(self) -> dict[str, Any]:
        """``uvicorn.Config`` / ``uvicorn.run`` keyword arguments serving HTTPS with these files."""
        options: dict[str, Any] = {"ssl_certfile": str(self.cert_file), "ssl_keyfile": str(self.key_file)}
        if self.client_ca_file is not None:
            options.update(ssl_ca_certs=str(self.client_ca_file), ssl_cert_reqs=ssl.CERT_REQUIRED)
        return options


def _read(path: Path, flag: str, marker: bytes, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from None
    if b"-----BEGIN " not in data or marker not in data:
        raise ConfigError(f"{flag} {path}: not a PEM {what} (expected a '-----BEGIN ...{marker.decode()}' block)")
    return data


def _encrypted_key(path: Path) -> Callable[[], str]:
    def refuse() -> str:
        raise ConfigError(f"{KEY_FLAG} {path}: the private key is encrypted; give an unencrypted key")

    return refuse


def load_tls(cert: str | Path | None, key: str | Path | None, client_ca: str | Path | None = None) -> TlsConfig | None:
    """The checked :class:`TlsConfig` of the files (None when neither ``cert`` nor ``key`` is
    given); ConfigError naming the flag and file for anything a server could not start with."""
    if cert is None and key is None:
        if client_ca is not None:
            raise ConfigError(f"{CLIENT_CA_FLAG} needs {CERT_FLAG} and {KEY_FLAG} (the server's own certificate)")
        return None
    if cert is None or key is None:
        given, missing = (KEY_FLAG, CERT_FLAG) if cert is None else (CERT_FLAG, KEY_FLAG)
        raise ConfigError(f"{given} needs {missing}: TLS takes the server's certificate and its private key")
    cert_file, key_file = Path(cert), Path(key)
    cert_pem = _read(cert_file, CERT_FLAG, b"CERTIFICATE-----", "certificate")
    key_pem = _read(key_file, KEY_FLAG, b"PRIVATE KEY-----", "private key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_file, key_file, password=_encrypted_key(key_file))
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            mismatch = f"{KEY_FLAG} {key_file}: the private key does not match {CERT_FLAG} {cert_file}"
            raise ConfigError(mismatch) from None
        raise ConfigError(
            f"{CERT_FLAG} {cert_file} / {KEY_FLAG} {key_file}: not a usable certificate and key ({exc.reason or exc})"
        ) from None
    ca_file = ca_pem = None
    if client_ca is not None:
        ca_file = Path(client_ca)
        ca_pem = _read(ca_file, CLIENT_CA_FLAG, b"CERTIFICATE-----", "CA certificate")
        try:
            context.load_verify_locations(cafile=ca_file)
        except ssl.SSLError as exc:
            reason = exc.reason or exc
            raise ConfigError(f"{CLIENT_CA_FLAG} {ca_file}: not a usable CA certificate ({reason})") from None
    return TlsConfig(cert_file, key_file, ca_file, cert_pem, key_pem, ca_pem)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a literal address or ``localhost``) is reachable only from this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to any interface


def check_plaintext(addresses: list[tuple[str, str, int]], tls: TlsConfig | None, insecure: bool) -> None:
    """ConfigError when a front end would serve plain text beyond loopback: ``addresses`` are the
    ``(flag, host, port)`` of the front ends served; allowed with ``tls`` or ``insecure``."""
    if tls is not None or insecure:
        return
    for flag, host, port in addresses:
        if not is_loopback(host):
            shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            raise ConfigError(
                f"{flag} {shown}: refusing to serve plain text on a non-loopback address (bearer tokens "
                f"and inputs would cross the network unencrypted); give {CERT_FLAG} and {KEY_FLAG}, or "
                "--insecure when a proxy or service mesh in front terminates TLS"
            )


__all__ = ["TlsConfig", "check_plaintext", "is_loopback", "load_tls"]
