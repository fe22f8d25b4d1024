"""``bnc-serve``: serve a directory of exported models over the Open Inference Protocol (KServe V2).

::

    bnc-serve --repository models/ [--http 127.0.0.1:8000] [--grpc 127.0.0.1:8001]
              [--runtime onnxruntime|litert|numpy|...] [--threads N]
              [--max-batch N --max-queue-delay-ms T] [--api-key-file F] [--max-request-bytes N]
              [--poll S] [--workers N] [--no-access-log]
              [--max-rows N] [--max-connections N] [--header-timeout S] [--body-timeout S]
              [--keep-alive-timeout S] [--grpc-keepalive-time S] [--grpc-keepalive-timeout S]
              [--grpc-max-connection-idle S] [--grpc-max-connection-age S]
              [--tls-cert F --tls-key F [--tls-client-ca F]] [--insecure] [--shutdown-delay S]
              [--trace-level OFF|TIMESTAMPS] [--trace-rate N]
              [--version-policy latest:N|all|specific:V,...] [--key-file F]

Without ``--http`` and ``--grpc`` it serves HTTP on 127.0.0.1:8000; addresses bind loopback
unless a host is given (``--http 0.0.0.0:8000`` to listen on every interface). Beyond loopback it
serves only TLS (``--tls-cert``/``--tls-key``; ``--tls-client-ca``: mutual TLS, on both front
ends; :mod:`bnc_deploy.serve.tls`) unless ``--insecure`` says a proxy or mesh in front does. Every model file
of the repository is loaded and checked before the ports open (``bnc_deploy.serve.repository``
documents the layout); a file that fails is reported and the server starts without it (not ready).
SIGTERM / SIGINT shut down gracefully (:mod:`bnc_deploy.serve.health`): readiness turns off at
once (REST ``/v2/health/ready`` 503, gRPC ``grpc.health.v1.Health`` NOT_SERVING) while requests
are still served for ``--shutdown-delay`` seconds (a second signal cuts it short); then the ports
close, requests in flight finish (at most ``--graceful-timeout`` seconds), batchers drain, exit
status 0.

What one client may cost the server (rows, timeouts, connections) is bounded by the limit flags,
whose defaults are safe on a network (:mod:`bnc_deploy.serve.limits` says what each does on
either front end). The process's soft limit on open files is raised to fit the connection caps.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading

from bnc_deploy.cli.common import cli_main
from bnc_deploy.errors import ConfigError, require_extra
from bnc_deploy.serve.limits import ServeLimits

PROG = "bnc-serve"
DEFAULT_HTTP = "127.0.0.1:8000"


def address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``PORT`` for 127.0.0.1) -> (host, port); ConfigError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"bad address {text!r}: expected HOST:PORT (e.g. 127.0.0.1:8000)")
    return host, int(port)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Serve exported models (.onnx, .ort, .tflite, .h, .bnc) over the "
        "Open Inference Protocol (KServe V2): REST and gRPC.",
    )
    _add_model_flags(p)
    _add_limit_flags(p.add_argument_group("limits (per front end and process; bnc_deploy.serve.limits)"))
    _add_tls_flags(p.add_argument_group("TLS (both front ends; bnc_deploy.serve.tls)"))
    _add_process_flags(p)
    return p


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    """The repository, the addresses, how models run and batch, authentication, the request size."""
    p.add_argument(
        "--repository",
        required=True,
        metavar="DIR",
        help="directory of model files DIR/<name>.{onnx,ort,tflite,h,bnc}; publish by write-then-rename",
    )
    p.add_argument(
        "--http", metavar="HOST:PORT", help=f"serve REST here (default {DEFAULT_HTTP} when --grpc is not given)"
    )
    p.add_argument("--grpc", metavar="HOST:PORT", help="serve gRPC (inference.GRPCInferenceService) here")
    p.add_argument(
        "--runtime",
        help="run every file in this runtime (default: by extension: .onnx/.ort onnxruntime, "
        ".tflite litert, .h native, .bnc numpy)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="intra-op threads per model (default: the runtime's), and the worker "
        "threads and processes that decode and run large REST requests (default: the CPU count)",
    )
    p.add_argument(
        "--max-batch",
        type=int,
        default=0,
        metavar="N",
        help="dynamic batching: run up to N rows of queued requests together (default 0: off)",
    )
    p.add_argument(
        "--max-queue-delay-ms",
        type=float,
        default=0.0,
        metavar="T",
        help="dynamic batching: wait at most T ms for more requests (default 0)",
    )
    p.add_argument(
        "--api-key-file",
        metavar="F",
        help="require 'Authorization: Bearer <key>' (one key per line in F) on every route but liveness",
    )
    p.add_argument(
        "--version-policy",
        default="latest:1",
        metavar="POLICY",
        help="which versions of DIR/<name>/<version>/model.<ext> serve (a flat file is version 1): "
        "latest:N, all or specific:V,... (Triton's version_policy; default latest:1)",
    )
    p.add_argument(
        "--key-file",
        metavar="F",
        help="HMAC key of signed model files (bnc-export --sign-key), for models without their own "
        "DIR/<name>.key; with a key, unsigned files are refused",
    )
    p.add_argument(
        "--max-request-bytes",
        type=int,
        default=ServeLimits.max_request_bytes,
        metavar="N",
        help="largest request body / gRPC message accepted (default 64 MiB)",
    )


def _add_limit_flags(limits) -> None:
    """What one client may cost the server (:class:`ServeLimits`' fields)."""
    limits.add_argument(
        "--max-rows",
        type=int,
        default=ServeLimits.max_rows,
        metavar="N",
        help=f"most rows in one request, refused (413) before decoding (default {ServeLimits.max_rows})",
    )
    limits.add_argument(
        "--max-connections",
        type=int,
        default=ServeLimits.max_connections,
        metavar="N",
        help="most open connections; one more closes the longest-waiting connection without a "
        f"request in progress, else is answered 503 (default {ServeLimits.max_connections})",
    )
    limits.add_argument(
        "--header-timeout",
        type=float,
        default=ServeLimits.header_timeout,
        metavar="S",
        help="a request's headers must arrive within S seconds of the connection (or the previous "
        f"response); gRPC: the handshake (default {ServeLimits.header_timeout:g})",
    )
    limits.add_argument(
        "--body-timeout",
        type=float,
        default=ServeLimits.body_timeout,
        metavar="S",
        help=f"a request's body must arrive within S seconds of its headers, else 408 "
        f"(default {ServeLimits.body_timeout:g})",
    )
    limits.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=ServeLimits.keep_alive_timeout,
        metavar="S",
        help=f"close idle HTTP keep-alive connections after S seconds (default {ServeLimits.keep_alive_timeout:g})",
    )
    limits.add_argument(
        "--grpc-keepalive-time",
        type=float,
        default=ServeLimits.grpc_keepalive_time,
        metavar="S",
        help=f"gRPC keepalive ping interval (default {ServeLimits.grpc_keepalive_time:g})",
    )
    limits.add_argument(
        "--grpc-keepalive-timeout",
        type=float,
        default=ServeLimits.grpc_keepalive_timeout,
        metavar="S",
        help="close a gRPC connection whose keepalive ping is not answered in S "
        f"seconds (default {ServeLimits.grpc_keepalive_timeout:g})",
    )
    limits.add_argument(
        "--grpc-max-connection-idle",
        type=float,
        default=ServeLimits.grpc_max_connection_idle,
        metavar="S",
        help="close gRPC connections without calls for S seconds (GOAWAY; "
        f"default {ServeLimits.grpc_max_connection_idle:g})",
    )
    limits.add_argument(
        "--grpc-max-connection-age",
        type=float,
        default=ServeLimits.grpc_max_connection_age,
        metavar="S",
        help="close gRPC connections older than S seconds (GOAWAY; clients reconnect, "
        f"load spreads; default {ServeLimits.grpc_max_connection_age:g})",
    )


def _add_tls_flags(tls) -> None:
    """The server's certificate, mutual TLS, and the consent to plain text beyond loopback."""
    tls.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="serve REST (HTTPS) and gRPC over TLS with this PEM certificate (its chain may follow it); "
        "needs --tls-key",
    )
    tls.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM, unencrypted)")
    tls.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="mutual TLS: accept only clients presenting a certificate signed by this CA (PEM)",
    )
    tls.add_argument(
        "--insecure",
        action="store_true",
        help="allow plain text on a non-loopback --http/--grpc address (refused otherwise), e.g. when a "
        "proxy or service mesh in front terminates TLS",
    )


def _add_process_flags(p: argparse.ArgumentParser) -> None:
    """Reloading, worker processes, shutdown and logging."""
    p.add_argument(
        "--poll",
        type=float,
        metavar="S",
        help="reload changed files, load new and unload removed ones "
        "every S seconds (files named .* or *.tmp* are ignored)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="HTTP worker processes (uvicorn; each loads the models itself; not with --grpc)",
    )
    p.add_argument(
        "--graceful-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="on SIGTERM, wait at most S seconds for requests in flight (default 30)",
    )
    p.add_argument(
        "--trace-level",
        type=str.upper,
        choices=["OFF", "TIMESTAMPS"],
        default="OFF",
        help="OpenTelemetry spans of inference requests (extra 'otel'; exported as the OTEL_* environment "
        "says; changeable at run time: POST /v2/trace/setting) (default OFF)",
    )
    p.add_argument("--trace-rate", type=int, default=1, metavar="N", help="trace one request in N (default 1)")
    p.add_argument(
        "--shutdown-delay",
        type=float,
        default=0.0,
        metavar="S",
        help="on SIGTERM, report not ready (REST /v2/health/ready 503, gRPC health NOT_SERVING) but keep "
        "serving S seconds before the ports close, so that load balancers stop sending first (default 0)",
    )
    p.add_argument(
        "--no-access-log",
        dest="access_log",
        action="store_false",
        help="no JSON access log line per HTTP request on stdout",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def limits_of(args) -> ServeLimits:
    """The :class:`ServeLimits` of the parsed flags (ConfigError naming a bad one)."""
    return ServeLimits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ServeLimits)})


def raise_open_files_limit(limits: ServeLimits) -> None:
    """Raise the soft limit on open files (up to the hard one) to fit both front ends' connection
    caps and the server's own files; warn when the hard limit is lower."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return
    needed = 2 * limits.max_connections + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        if target < needed:
            print(
                f"{PROG}: warning: the open-files limit is {target}; --max-connections {limits.max_connections} "
                f"on two front ends needs about {needed}",
                file=sys.stderr,
            )


def _check(args) -> None:
    if args.threads is not None and args.threads < 1:
        raise ConfigError("--threads must be >= 1")
    if args.max_batch < 0 or args.max_queue_delay_ms < 0:
        raise ConfigError("--max-batch and --max-queue-delay-ms must be >= 0")
    if args.poll is not None and args.poll <= 0:
        raise ConfigError("--poll must be > 0 seconds")
    if args.workers < 1:
        raise ConfigError("--workers must be >= 1")
    if args.workers > 1 and args.grpc:
        raise ConfigError("--workers > 1 serves HTTP only; run gRPC in a separate bnc-serve")
    if args.trace_rate < 1:
        raise ConfigError("--trace-rate must be >= 1")
    if args.trace_level != "OFF":
        from bnc_deploy.serve import tracing

        tracing.require()  # MissingExtraError naming the 'otel' extra
    if args.shutdown_delay < 0:
        raise ConfigError("--shutdown-delay must be >= 0 seconds")
    if args.workers > 1 and args.shutdown_delay:
        raise ConfigError("--shutdown-delay needs one process; with --workers > 1 uvicorn stops the workers")
    if args.runtime:
        from bnc_deploy.runtimes.base import runtime_class

        runtime_class(args.runtime)  # ConfigError for an unknown name, MissingExtraError naming the extra
    _check_versions_and_keys(args)


def _check_versions_and_keys(args) -> None:
    from bnc_deploy.serve.keys import read_server_key
    from bnc_deploy.serve.versions import VersionPolicy

    try:
        VersionPolicy.parse(args.version_policy)
    except ConfigError as exc:
        raise ConfigError(f"--version-policy: {exc}") from None
    if args.key_file:
        read_server_key(args.key_file)  # ConfigError naming --key-file and the file


def _logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    serve_log = logging.getLogger("bnc_deploy.serve")
    serve_log.addHandler(handler)
    serve_log.setLevel(level.upper())


def _tls(args, http: tuple[str, int] | None, grpc: tuple[str, int] | None):
    """The checked TLS files (None: plain text); ConfigError for plain text beyond loopback."""
    from bnc_deploy.serve.tls import check_plaintext, load_tls

    tls = load_tls(args.tls_cert, args.tls_key, args.tls_client_ca)
    served = [("--http", http), ("--grpc", grpc)]
    check_plaintext([(flag, *where) for flag, where in served if where], tls, args.insecure)
    return tls


def _serve_workers(args, http: tuple[str, int], limits: ServeLimits, tls) -> int:
    """--workers N: uvicorn's process manager runs the app factory in N processes."""
    import uvicorn

    from bnc_deploy.serve import metrics
    from bnc_deploy.serve.connections import GuardedHttpToolsProtocol

    os.environ.update(
        {
            k: str(v)
            for k, v in {
                "BNC_SERVE_REPOSITORY": os.path.abspath(args.repository),
                "BNC_SERVE_RUNTIME": args.runtime or "",
                "BNC_SERVE_THREADS": args.threads or "",
                "BNC_SERVE_MAX_BATCH": args.max_batch,
                "BNC_SERVE_MAX_QUEUE_DELAY_MS": args.max_queue_delay_ms,
                "BNC_SERVE_API_KEY_FILE": os.path.abspath(args.api_key_file) if args.api_key_file else "",
                "BNC_SERVE_POLL": args.poll or "",
                "BNC_SERVE_ACCESS_LOG": "1" if args.access_log else "0",
                "BNC_SERVE_TRACE_LEVEL": args.trace_level,
                "BNC_SERVE_TRACE_RATE": args.trace_rate,
                "BNC_SERVE_VERSION_POLICY": args.version_policy,
                "BNC_SERVE_KEY_FILE": os.path.abspath(args.key_file) if args.key_file else "",
            }.items()
        }
    )
    os.environ.update(limits.to_env())  # each worker's app and connection guard read them back
    with metrics.multiprocess_dir() as folder:  # /metrics reports every worker (serve.metrics)
        print(f"{PROG}: {args.workers} workers; metrics in {folder}", file=sys.stderr)
        uvicorn.run(
            "bnc_deploy.serve.app:app_from_env",
            factory=True,
            host=http[0],
            port=http[1],
            workers=args.workers,
            http=GuardedHttpToolsProtocol,
            loop="auto",
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_keep_alive=limits.keep_alive_timeout,
            timeout_graceful_shutdown=args.graceful_timeout,
            **(tls.uvicorn_options() if tls else {}),
        )
    return 0


@cli_main(PROG)
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    require_extra("bnc-serve", "serve", "starlette", "uvicorn", "prometheus_client")
    _check(args)
    limits = limits_of(args)
    http = address(args.http) if args.http else (None if args.grpc else address(DEFAULT_HTTP))
    grpc_address = "{}:{}".format(*address(args.grpc)) if args.grpc else None
    if args.grpc:
        require_extra("bnc-serve --grpc", "serve", "grpc", "grpc_health")
    tls = _tls(args, http, address(args.grpc) if args.grpc else None)
    _logging(args.log_level)
    from bnc_deploy.serve import auth

    keys = auth.load_api_keys(args.api_key_file) if args.api_key_file else None
    raise_open_files_limit(limits)
    if args.workers > 1:
        return _serve_workers(args, http, limits, tls)

    from bnc_deploy.serve import tracing

    tracing.configure(args.trace_level, args.trace_rate)
    repository = _load_repository(args)
    return _serve(args, repository, http, grpc_address, keys, limits, tls)


def _load_repository(args):
    """The model repository, every file loaded and checked (each file's state printed), polling if asked."""
    from bnc_deploy.serve.keys import read_server_key
    from bnc_deploy.serve.repository import ModelRepository

    repository = ModelRepository(
        args.repository,
        runtime=args.runtime,
        threads=args.threads,
        max_batch=args.max_batch,
        max_queue_delay_ms=args.max_queue_delay_ms,
        version_policy=args.version_policy,
        key=read_server_key(args.key_file) if args.key_file else None,
    )
    repository.load_all()
    for entry in repository.index():
        print(
            f"{PROG}: model {entry['name']}: {entry['state']} {entry['version']} {entry['reason']}".rstrip(),
            file=sys.stderr,
        )
    if args.poll:
        repository.start_polling(args.poll)
    return repository


def _serve(
    args, repository, http: tuple[str, int] | None, grpc_address: str | None, keys, limits: ServeLimits, tls
) -> int:
    """Serve gRPC and/or HTTP until stopped (SIGTERM/SIGINT), then drain and close."""
    from bnc_deploy.serve.health import ServingHealth, ShutdownSequence

    # The signal starts the shutdown sequence: not ready at once, the drain callbacks (gRPC's stop,
    # uvicorn's exit) after --shutdown-delay; uvicorn's own handlers are redirected to it too
    # (_serve_http), so both front ends drain together and the batchers after them.
    health = ServingHealth(repository)
    shutdown = ShutdownSequence(health, args.shutdown_delay)
    signal.signal(signal.SIGTERM, shutdown.signal)
    signal.signal(signal.SIGINT, shutdown.signal)
    grpc_stopped: list[threading.Event] = []
    try:
        if grpc_address:
            from bnc_deploy.serve.grpc_server import start_grpc_server

            grpc_server = start_grpc_server(
                repository, grpc_address, api_keys=keys, limits=limits, tls=tls, health=health
            )
            shutdown.on_drain(lambda: grpc_stopped.append(grpc_server.stop(args.graceful_timeout)))
            print(f"{PROG}: gRPC{' (TLS)' if tls else ''} on {grpc_address}", file=sys.stderr)
        if http:
            _serve_http(args, repository, http, keys, limits, tls, shutdown)
        else:
            while not shutdown.drained.wait(0.5):
                pass
    finally:
        shutdown.drain()  # not ready; gRPC stops accepting (also when REST could not listen)
        for stopped in grpc_stopped:
            stopped.wait()  # gRPC requests in flight finished
        repository.close()  # polling stops; batchers drain
        print(f"{PROG}: stopped", file=sys.stderr)
    return 0


def _serve_http(args, repository, http: tuple[str, int], keys, limits: ServeLimits, tls, shutdown) -> None:
    """REST in this process, until uvicorn's graceful shutdown; ConfigError when it cannot listen."""
    import uvicorn

    from bnc_deploy.serve.app import create_app
    from bnc_deploy.serve.connections import uvicorn_config

    app = create_app(
        repository,
        api_keys=keys,
        limits=limits,
        threads=args.threads,
        access_log=args.access_log,
        close_repository=False,
        health=shutdown.health,
    )
    config = uvicorn_config(
        app,
        http[0],
        http[1],
        limits,
        loop="auto",
        lifespan="on",
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=args.graceful_timeout,
        **(tls.uvicorn_options() if tls else {}),
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            if shutdown.drained.is_set():  # already closing: uvicorn's own (a second Ctrl-C forces it)
                return super().handle_exit(sig, frame)
            shutdown.signal(sig, frame)  # not ready now; should_exit after the delay (below)

    server = Server(config)
    shutdown.on_drain(lambda: setattr(server, "should_exit", True))
    print(f"{PROG}: HTTP on {'https' if tls else 'http'}://{http[0]}:{http[1]}", file=sys.stderr)
    try:
        server.run()
    except SystemExit:  # uvicorn exits 1 when it cannot bind (after logging why)
        server.started = False
    if not server.started:
        raise ConfigError(f"--http {http[0]}:{http[1]}: cannot listen there (address in use or not local?)")


if __name__ == "__main__":
    sys.exit(main())
