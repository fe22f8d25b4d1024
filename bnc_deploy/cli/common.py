"""Shared CLI plumbing: one-line errors for bad input, tracebacks for bugs, quiet ^C and ``| head``.

The rule (see :mod:`bnc_deploy.errors`): a :class:`~bnc_deploy.errors.BncDeployError` (the
input is wrong) or a missing/unreadable path is reported as ``PROG: error: message`` on one line
with exit status 2. Anything else, a plain ``ValueError`` included, is a bug and keeps its
traceback.

:func:`cli_main` wraps a command's ``main(argv)`` with that rule plus:

* ``KeyboardInterrupt`` -> ``PROG: interrupted; nothing written`` and exit status 130
  (128 + SIGINT, what a shell reports for ^C);
* ``BrokenPipeError`` (stdout closed early, ``bnc-profile ... --json | head``) -> no message,
  exit status 141 (128 + SIGPIPE, what a shell reports for a program the pipe stopped).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from contextlib import contextmanager
from typing import Callable

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


def cli_main(prog: str, *, interrupted: str = INTERRUPTED) -> Callable:
    """Decorator for a command's ``main(argv) -> int``: the error rule of this module's docstring.

    User errors anywhere in ``main`` (also while writing output after the work) exit 2 with one
    line; ``KeyboardInterrupt`` exits 130 with ``prog: <interrupted>``; a broken stdout pipe exits
    141 quietly. ``SystemExit`` (argparse, an explicit status) passes through; any other exception
    propagates with its traceback.
    """

    def decorate(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapper(argv: list[str] | None = None) -> int:
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
