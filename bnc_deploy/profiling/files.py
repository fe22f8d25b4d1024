"""Which files ``bnc-profile`` takes: model files (a suffix some runtime reads,
:func:`bnc_deploy.runtimes.base.model_suffixes`) and JSON result files of earlier runs."""

from __future__ import annotations

from pathlib import Path

from bnc_deploy.errors import ConfigError
from bnc_deploy.runtimes.base import model_suffixes

RESULT_SUFFIXES = (".json",)


def is_model_file(path) -> bool:
    return Path(path).suffix.lower() in model_suffixes()


def is_result_file(path) -> bool:
    return Path(path).suffix.lower() in RESULT_SUFFIXES


def check_files(files) -> None:
    """Every file exists and is a model or result file (IsADirectoryError, ConfigError, FileNotFoundError)."""
    known = model_suffixes() + RESULT_SUFFIXES
    for f in files:
        p = Path(f)
        if p.is_dir():
            raise IsADirectoryError(f"{p}: is a directory, not a model or result file")
        if p.suffix.lower() not in known:
            raise ConfigError(f"{p}: unknown file type {p.suffix or '(none)'!r}; expected {', '.join(known)}")
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no such file")
