"""Shared CLI plumbing: one-line errors for bad input, tracebacks for bugs, quiet ^C and ``| head``.

The rule (see :mod:`bnc_deploy.errors`): a :class:`~bnc_deploy.errors.BncDeployError` (the
input is wrong) or a missing/unreadable path is reported as ``PROG: error: message`` on one line
with exit status 2. Anything else, a plain ``ValueError`` included, is a bug and keeps its
traceback.

:func:`cli_main` wraps a command's ``main(argv)`` with that rule plus:

* ``KeyboardInterrupt`` -> ``PROG: interrupted; nothing written`` and exit status 130
  (128 + SIGINT, what a shell reports for ^C);
* ``BrokenPipeError`` (stdout closed early, ``bnc-profile ... --json | head``) -> no message,
  exit status 141 (128 + SIGPIPE, what a shell reports for a program the pipe stopped);
* TensorFlow's, absl's and LiteRT's own log lines are kept off stderr: ``TF_CPP_MIN_LOG_LEVEL``
  defaults to 2 (errors only) before anything imports TensorFlow, and, since LiteRT's C++
  logger ignores that variable (``INFO: Created TensorFlow Lite XNNPACK delegate for CPU.``),
  lines written to file descriptor 2 by native code pass through :func:`native_log_filter`,
  which drops their info and warning lines (:data:`NATIVE_LOG_NOISE`) and forwards everything
  else. Set ``TF_CPP_MIN_LOG_LEVEL=0`` (or 1) to see all of them again.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager

from bnc_deploy.errors import BncDeployError

#: Exit status for bad arguments, data or model files (argparse uses 2 as well).
EXIT_USAGE = 2
#: Exit status after ^C (128 + SIGINT).
EXIT_INTERRUPTED = 130
#: Exit status when stdout's reader went away (128 + SIGPIPE).
EXIT_BROKEN_PIPE = 141

#: Errors that mean "the user's input is wrong": reported in one line, exit status 2.
#: The toolkit's root error and the path errors a user causes (a missing file, a directory where a
#: file was expected, a file that cannot be read). Not ``ValueError``: a plain one is a bug.
USER_ERRORS = (BncDeployError, FileNotFoundError, IsADirectoryError, PermissionError, NotADirectoryError)

#: The one line printed after ^C, unless a command says otherwise.
INTERRUPTED = "interrupted; nothing written"


def error_line(prog: str, exc: BaseException) -> str:
    """``prog: error: message`` on one line (a multi-line message is joined with spaces)."""
    message = " ".join(part.strip() for part in str(exc).splitlines() if part.strip()) or type(exc).__name__
    return f"{prog}: error: {message}"


@contextmanager
def user_errors(prog: str):
    """Turn user-input errors (:data:`USER_ERRORS`) into ``prog: error: message`` and exit status 2."""
    try:
        yield
    except USER_ERRORS as exc:
        print(error_line(prog, exc), file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again (Python's
    documented recipe for SIGPIPE); a no-op when stdout is not a real file (tests capture it)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is both an OSError and a ValueError
        pass


#: Native log lines dropped from stderr: LiteRT/TFLite's minimal logger at info level, absl's
#: info and warning lines (``I0000 00:00:... file.cc:12] ...``), and absl's note that it was not
#: initialised. Errors and anything else pass.
NATIVE_LOG_NOISE = re.compile(
    rb"(INFO|VERBOSE): "
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|[IW]\d{4} [\d:.]+ +\d+ \S+:\d+\] "
)


def quiet_native_logs_wanted() -> bool:
    """Default ``TF_CPP_MIN_LOG_LEVEL`` to 2; True unless the user asked for TensorFlow's logs (0, 1)."""
    level = os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return int(level) >= 2
    except ValueError:
        return True


def _pump(read_fd: int, write_fd: int) -> None:
    """Copy ``read_fd`` to ``write_fd`` line by line, dropping :data:`NATIVE_LOG_NOISE` lines."""
    pending = b""
    while True:
        try:
            chunk = os.read(read_fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        _write_all(write_fd, b"".join(line + b"\n" for line in lines if not NATIVE_LOG_NOISE.match(line)))
    if pending and not NATIVE_LOG_NOISE.match(pending):
        _write_all(write_fd, pending)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data) :]
        except OSError:
            return


@contextmanager
def native_log_filter():
    """While the block runs, native writes to file descriptor 2 go through a pipe whose reader (a
    thread) drops :data:`NATIVE_LOG_NOISE` lines and forwards the rest to the real stderr; Python's
    ``sys.stderr`` (messages, progress bars, tracebacks) writes to the real stderr directly.

    Does nothing when ``sys.stderr`` is not the process' own (tests capture it, or an outer command
    already filters), when the user set ``TF_CPP_MIN_LOG_LEVEL`` below 2, or where the descriptors
    cannot be rearranged.
    """
    if not quiet_native_logs_wanted() or sys.stderr is not sys.__stderr__ or sys.stderr is None:
        yield
        return
    try:
        if sys.stderr.fileno() != 2:
            raise OSError("stderr is not file descriptor 2")
        sys.stderr.flush()
        real = os.dup(2)
        read_fd, write_fd = os.pipe()
    except (OSError, ValueError):  # io.UnsupportedOperation: no file descriptor
        yield
        return
    python_stderr = sys.stderr
    try:
        direct = open(os.dup(real), "w", buffering=1, encoding=python_stderr.encoding, errors=python_stderr.errors)
        os.dup2(write_fd, 2)
    except OSError:
        os.close(write_fd)
        os.close(read_fd)
        os.close(real)
        yield
        return
    os.close(write_fd)
    pump = threading.Thread(target=_pump, args=(read_fd, real), name="native-log-filter", daemon=True)
    pump.start()
    sys.stderr = direct
    try:
        yield
    finally:
        sys.stderr = python_stderr
        try:
            direct.flush()
        except OSError:
            pass
        direct.close()
        os.dup2(real, 2)  # the pipe's last writer is gone: the pump reads to its end and stops
        pump.join(timeout=5)
        if not pump.is_alive():  # else a child process still holds the pipe: leave both open
            os.close(read_fd)
            os.close(real)


def cli_main(prog: str, *, interrupted: str = INTERRUPTED) -> Callable:
    """Decorator for a command's ``main(argv) -> int``: the error rule of this module's docstring.

    User errors anywhere in ``main`` (also while writing output after the work) exit 2 with one
    line; ``KeyboardInterrupt`` exits 130 with ``prog: <interrupted>``; a broken stdout pipe exits
    141 quietly. ``SystemExit`` (argparse, an explicit status) passes through; any other exception
    propagates with its traceback. TensorFlow's and LiteRT's log lines are filtered out
    (:func:`native_log_filter`).
    """

    def decorate(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapper(argv: list[str] | None = None) -> int:
            with native_log_filter():
                try:
                    with user_errors(prog):
                        return main(argv)
                except KeyboardInterrupt:
                    print(f"{prog}: {interrupted}", file=sys.stderr)
                    raise SystemExit(EXIT_INTERRUPTED) from None
                except BrokenPipeError:
                    _silence_stdout()
                    raise SystemExit(EXIT_BROKEN_PIPE) from None

        return wrapper

    return decorate


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))
