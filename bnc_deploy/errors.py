"""The toolkit's error types: one root, :class:`BncDeployError`, for everything a user can cause.

Contract
--------
* Every error that means "the input is wrong" (a file, a dataset, an argument, a value, a
  model that cannot be exported as asked) is a :class:`BncDeployError`. Its message is one line
  that names the problem: the file, the feature, the value, the row.
* The command-line tools map exactly these (and missing files) to one line on stderr and exit
  status 2. Anything else is a bug and keeps its traceback.
* Each type also derives from :class:`ValueError`, as it always did, so ``except ValueError``
  in user code keeps working.

Modules raise the specific type; they re-export it where callers used to find it
(``artifacts.ArtifactError``, ``validation.InputError``, ``runtimes.base.RuntimeLoadError``, ...).
"""

from __future__ import annotations


class BncDeployError(ValueError):
    """Root of every error a user can cause; reported in one line by the command-line tools."""


class InputError(BncDeployError):
    """Inputs to a model do not match its features (shape, dtype or value range)."""


class DatasetError(BncDeployError):
    """A dataset file or specification is wrong; the message names the file and the problem."""


class ArtifactError(BncDeployError):
    """A model file is missing, corrupt, tampered with, of a newer version, or inconsistent."""


class UnsupportedBitWidth(BncDeployError):
    """A bit-width combination outside what the toolkit can train and export exactly."""


class ExportError(BncDeployError):
    """An artifact cannot be exported as asked (unsupported option, missing discretizer, ...),
    or the written file failed verification and was not published."""


class RuntimeLoadError(BncDeployError):
    """An exported model file cannot be loaded (missing, corrupt, not a bnc-deploy export)."""


class MetadataError(BncDeployError):
    """An exported file's bnc-deploy metadata is missing, corrupt, newer than this version reads,
    or inconsistent."""


class ConfigError(BncDeployError):
    """A training, export or profiling option is invalid (a value out of range, a flag that does
    not apply to this model)."""


class OutputError(BncDeployError):
    """An output file cannot be written where asked (a directory, the input itself, a read-only
    or full folder); nothing was written and any existing file is untouched."""


class ResultFileError(BncDeployError):
    """A JSON result file (``--json`` rows given to ``bnc-profile``) is not valid JSON or not a list
    of objects."""


class MissingExtraError(BncDeployError, ImportError):
    """A feature needs an optional dependency that is not installed; the message says which extra
    to install (``pip install 'bnc-deploy[EXTRA]'``)."""

    def __init__(self, what: str, extra: str, cause: BaseException | None = None) -> None:
        detail = f" ({cause})" if cause else ""
        super().__init__(f"{what} needs the '{extra}' extra{detail}: pip install 'bnc-deploy[{extra}]'")
        self.extra = extra


def require_extra(what: str, extra: str, *modules: str) -> None:
    """Raise :class:`MissingExtraError` for ``what`` when a top-level module of ``modules`` is not
    installed (looked up without importing it, so the check costs nothing when it passes)."""
    import importlib.util

    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(what, extra, ModuleNotFoundError(f"No module named {missing[0]!r}"))
