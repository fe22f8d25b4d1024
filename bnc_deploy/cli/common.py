"""Shared CLI plumbing: clear one-line errors instead of tracebacks for bad input."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager

from bnc_deploy.artifacts.container import ArtifactError
from bnc_deploy.datasets.base import DatasetError
from bnc_deploy.validation import InputError

#: Exit status for bad arguments, data or model files (argparse uses 2 as well).
EXIT_USAGE = 2

#: Errors that mean "the user's input is wrong": reported in one line, exit status 2.
USER_ERRORS = (ArtifactError, DatasetError, InputError, ValueError, FileNotFoundError)


@contextmanager
def user_errors(prog: str):
    """Turn user-input errors into ``prog: error: message`` and exit status 2."""
    try:
        yield
    except USER_ERRORS as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))
