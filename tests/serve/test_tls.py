"""TLS on both front ends: the official tritonclient over HTTPS and gRPC with TLS passes the
conformance checks (mutual TLS), clients without the CA or without a certificate are refused, bad
certificate files and plain text beyond loopback exit 2 with one line naming the file or flag.

The certificates are made per test session with ``cryptography`` (``tls_support.make_certs``): a
CA, a server certificate for 127.0.0.1/::1/localhost, a client CA and a client certificate, and a
second CA that signed nothing the server trusts.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from pathlib import Path

import pytest

pytest.importorskip("uvicorn", reason="bnc-serve needs the 'serve' extra")
pytest.importorskip("cryptography.x509", reason="the 'test' extra (cryptography) is not installed")

import serve_support as ss
import test_tritonclient_conformance as conformance
from tls_support import TlsServer, make_certs
from tritonclient_support import client_python, run_plan

from bnc_deploy.cli.serve import main as serve_main
from bnc_deploy.serve.tls import check_plaintext, is_loopback, load_tls


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> dict[str, str]:
    """The throwaway certificates of :func:`tls_support.make_certs` (``ca``, ``server_cert``, ...)."""
    return make_certs(tmp_path_factory.mktemp("certs"))


# -- bad input: exit 2, one line naming the file ---------------------------------------------------
def _exit_2(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as info:
        serve_main(argv)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert info.value.code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("bnc-serve: error:"), lines
    return lines[0]


def test_bad_tls_files_exit_2_with_one_line_naming_the_file(certs, tmp_path, capsys):
    repo = ["--repository", str(tmp_path)]
    cert, key = certs["server_cert"], certs["server_key"]
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    missing = str(tmp_path / "missing.pem")
    cases = [
        (["--tls-cert", missing, "--tls-key", key], ["--tls-cert", missing, "cannot read"]),
        (["--tls-cert", cert, "--tls-key", missing], ["--tls-key", missing, "cannot read"]),
        (["--tls-cert", str(tmp_path), "--tls-key", key], ["--tls-cert", str(tmp_path), "cannot read"]),
        (["--tls-cert", cert], ["--tls-cert needs --tls-key"]),
        (["--tls-key", key], ["--tls-key needs --tls-cert"]),
        (["--tls-client-ca", certs["client_ca"]], ["--tls-client-ca needs --tls-cert and --tls-key"]),
        (["--tls-cert", str(garbage), "--tls-key", key], [str(garbage), "not a PEM certificate"]),
        (["--tls-cert", key, "--tls-key", key], [key, "not a PEM certificate"]),
        (["--tls-cert", cert, "--tls-key", cert], [cert, "not a PEM private key"]),
        (["--tls-cert", cert, "--tls-key", certs["wrong_key"]], [certs["wrong_key"], "does not match", cert]),
        (["--tls-cert", cert, "--tls-key", certs["encrypted_key"]], [certs["encrypted_key"], "encrypted"]),
        (
            ["--tls-cert", cert, "--tls-key", key, "--tls-client-ca", str(garbage)],
            ["--tls-client-ca", str(garbage), "not a PEM CA certificate"],
        ),
    ]
    for flags, fragments in cases:
        line = _exit_2([*repo, *flags], capsys)
        for fragment in fragments:
            assert fragment in line, (flags, line)


def test_plain_text_beyond_loopback_needs_insecure(certs, tmp_path, capsys):
    repo = ["--repository", str(tmp_path)]
    for flags, shown in [
        (["--http", "0.0.0.0:0"], "--http 0.0.0.0:0"),
        (["--grpc", "0.0.0.0:0"], "--grpc 0.0.0.0:0"),
        (["--http", "127.0.0.1:0", "--grpc", "[::]:0"], "--grpc [::]:0"),
        (["--http", "example.org:0"], "--http example.org:0"),
    ]:
        line = _exit_2([*repo, *flags], capsys)
        assert shown in line and "plain text" in line, line
        assert "--tls-cert" in line and "--tls-key" in line and "--insecure" in line, line
    # The same addresses pass with --insecure or TLS; loopback needs neither.
    tls = load_tls(certs["server_cert"], certs["server_key"])
    wide = [("--http", "0.0.0.0", 8000), ("--grpc", "::", 8001)]
    check_plaintext(wide, None, insecure=True)
    check_plaintext(wide, tls, insecure=False)
    check_plaintext([("--http", "127.0.0.1", 1), ("--grpc", "::1", 2), ("--http", "localhost", 3)], None, False)
    assert is_loopback("127.0.0.2") and is_loopback("[::1]") and not is_loopback("10.0.0.1")


def test_load_tls_keeps_the_checked_files(certs):
    assert load_tls(None, None) is None
    tls = load_tls(certs["server_cert"], certs["server_key"], certs["client_ca"])
    assert tls.mutual and tls.cert_pem == Path(certs["server_cert"]).read_bytes()
    assert tls.client_ca_pem == Path(certs["client_ca"]).read_bytes()
    options = tls.uvicorn_options()
    assert options["ssl_cert_reqs"] == ssl.CERT_REQUIRED and options["ssl_ca_certs"] == certs["client_ca"]
    plain = load_tls(certs["server_cert"], certs["server_key"])
    assert not plain.mutual and "ssl_ca_certs" not in plain.uvicorn_options()


# -- tritonclient over TLS -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served_mtls(certs, tmp_path_factory):
    """The conformance suite's repository behind mutual TLS on both front ends (and an API key)."""
    client_python()  # skip before exporting anything when the client is absent
    tmp = tmp_path_factory.mktemp("tls")
    models = conformance._build_repository(tmp / "repo")
    keys = tmp / "keys.txt"
    keys.write_text(f"{conformance.API_KEY}\n")
    server = TlsServer(tmp / "repo", certs, mutual=True, grpc=True, args=["--api-key-file", keys])
    try:
        yield tmp, models, server
    finally:
        assert server.stop() == 0, server.log()


def test_conformance_over_https_and_grpc_with_mutual_tls(served_mtls):
    """The plain-text conformance checks, unchanged, through tritonclient's HTTPS and gRPC-TLS
    clients presenting a client certificate (run_plan passes the server's ``tls``)."""
    server = served_mtls[2]
    assert "HTTP on https://127.0.0.1:" in server.log() and "gRPC (TLS) on" in server.log()
    conformance.test_every_endpoint_every_protocol_bit_identical(served_mtls)
    conformance.test_errors_are_400_404_401_and_invalid_argument_not_found(served_mtls)
    conformance.test_explicit_version_and_repository_unload_load(served_mtls)


def test_mutual_tls_refuses_clients_without_a_certificate_or_the_ca(served_mtls, certs):
    tmp, _, server = served_mtls
    ca, cert, key = certs["ca"], certs["client_cert"], certs["client_key"]
    refused = {
        "no client certificate": {"ca": ca, "cert": None, "key": None},
        "a certificate of another CA": {"ca": ca, "cert": certs["stranger_cert"], "key": certs["stranger_key"]},
        "without the server's CA": {"ca": None, "cert": cert, "key": key},
        "plain text": None,
    }
    steps = [
        {"protocol": protocol, "op": "ready", "tls": tls} for tls in refused.values() for protocol in ("http", "grpc")
    ]
    steps += [{"protocol": protocol, "op": "ready"} for protocol in ("http", "grpc")]  # the plan's: accepted
    results, _ = run_plan(steps, tmp, server=server, headers=conformance.AUTH)
    for i, what in enumerate(refused):
        for j, protocol in enumerate(("http", "grpc")):
            r = results[2 * i + j]
            assert not r["ok"], f"{what} over {protocol} was accepted: {r}"
            # Refused by the handshake (the connection closed), not by an answer of the server.
            assert r["error"]["status"] in ("transport", "StatusCode.UNAVAILABLE"), (what, r)
            if what == "without the server's CA":  # the client's own check failed
                assert "CERTIFICATE_VERIFY_FAILED" in r["error"]["message"], r
    assert results[-2:] == [{"ok": True, "value": True}] * 2, results[-2:]
    # The standard library sees the same: the handshake fails without a client certificate.
    bare = ssl.create_default_context(cafile=ca)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        conn = http.client.HTTPSConnection("127.0.0.1", server.http_port, timeout=10, context=bare)
        conn.request("GET", "/v2/health/live")
        conn.getresponse().read()
    assert server.request("GET", "/v2/health/live")[0] == 200  # and keeps serving


def test_tls_without_client_ca_serves_any_client_that_trusts_the_server(certs, tmp_path):
    files = ss.build_repository(tmp_path / "repo", tflite=False)
    with TlsServer(tmp_path / "repo", certs, mutual=False, grpc=True) as server:
        x = ss.valid_rows(files["nb_onnx"], n=3)
        xin = [{"name": "x", "datatype": "INT64", "array": "x"}]
        steps = [{"protocol": p, "op": "infer", "model": "nb_onnx", "inputs": xin} for p in ("http", "grpc")]
        steps += [{"protocol": p, "op": "live", "tls": {"ca": None}} for p in ("http", "grpc")]  # default roots
        steps += [{"protocol": p, "op": "live", "tls": {"ca": certs["other_ca"]}} for p in ("http", "grpc")]
        results, saved = run_plan(steps, tmp_path, server=server, arrays={"x": x})
        for r in results[:2]:
            assert r["ok"], r
            assert saved[r["outputs"]["label"]].tolist() == conformance._expected(files["nb_onnx"].path, x)[2].tolist()
        for r in results[2:]:
            assert not r["ok"], f"a client that does not trust the server's CA was served: {r}"
            assert "CERTIFICATE_VERIFY_FAILED" in r["error"]["message"], r
        status, _, body = server.request("POST", "/v2/repository/index", b"{}")
        assert status == 200 and {m["name"] for m in json.loads(body)} >= {"nb_onnx"}
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):  # plain HTTP to the TLS port
            plain = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
            plain.request("GET", "/v2/health/live")
            plain.getresponse().read()
        assert server.stop() == 0, server.log()


def test_an_idle_https_connection_does_not_hold_the_shutdown(certs, tmp_path):
    """A kept-alive HTTPS client that never reads again: closing its connection gracefully would
    wait for its TLS close_notify, so the server would sit out --graceful-timeout; it aborts it."""
    ss.build_repository(tmp_path / "repo", tflite=False)
    server = TlsServer(tmp_path / "repo", certs, mutual=False, args=["--graceful-timeout", "20"])
    idle = http.client.HTTPSConnection("127.0.0.1", server.http_port, timeout=30, context=server.context)
    try:
        idle.request("GET", "/v2/health/ready")
        assert idle.getresponse().read() is not None  # kept alive, then left idle
        started = time.monotonic()
        assert server.stop() == 0, server.log()[-3000:]
        assert time.monotonic() - started < 15, "the idle TLS connection held the shutdown"
    finally:
        idle.close()
