"""bnc-deploy: few-bit Bayesian network classifiers and quantized DNNs, from training to devices.

Data flows one way::

    datasets/discretize -> train (torch) -> model artifact -> exporters -> runtimes -> profiler

The public API is importable from here, loaded on first use (PEP 562), so ``import bnc_deploy``
loads neither torch nor scikit-learn nor any runtime:

* from :mod:`bnc_deploy.api`: :func:`~bnc_deploy.api.load`, :func:`~bnc_deploy.api.export`,
  :func:`~bnc_deploy.api.profile`, :func:`~bnc_deploy.api.load_runtime`,
  :class:`~bnc_deploy.verify.ExportReport`, :class:`~bnc_deploy.verify.ExportResult`,
  :class:`~bnc_deploy.profiling.result.Profile`;
* from :mod:`bnc_deploy.fit`: :func:`~bnc_deploy.fit.fit_to_budget` (``bnc-fit``),
  :class:`~bnc_deploy.fit.FitResult`, :class:`~bnc_deploy.fit.InfeasibleBudget`;
* from :mod:`bnc_deploy.sklearn` (extra ``sklearn``): ``FayyadIraniDiscretizer``, ``BNClassifier``,
  ``DNNClassifier``, ``to_artifact``, ``from_artifact``. Without scikit-learn, using one raises
  :class:`~bnc_deploy.errors.MissingExtraError` naming the extra.

``bnc_deploy.exporters`` and ``bnc_deploy.runtimes`` live in the repository's top-level
``exporters/`` and ``runtimes/`` folders; setuptools installs them under ``bnc_deploy``.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bnc_deploy.version import __version__ as __version__  # re-exported

if TYPE_CHECKING:  # the lazy attributes below, for type checkers and documentation tools
    from bnc_deploy.api import ExportReport as ExportReport
    from bnc_deploy.api import ExportResult as ExportResult
    from bnc_deploy.api import Profile as Profile
    from bnc_deploy.api import export as export
    from bnc_deploy.api import load as load
    from bnc_deploy.api import load_runtime as load_runtime
    from bnc_deploy.api import profile as profile
    from bnc_deploy.fit import FitResult as FitResult
    from bnc_deploy.fit import InfeasibleBudget as InfeasibleBudget
    from bnc_deploy.fit import fit_to_budget as fit_to_budget
    from bnc_deploy.sklearn import BNClassifier as BNClassifier
    from bnc_deploy.sklearn import DNNClassifier as DNNClassifier
    from bnc_deploy.sklearn import FayyadIraniDiscretizer as FayyadIraniDiscretizer
    from bnc_deploy.sklearn import from_artifact as from_artifact
    from bnc_deploy.sklearn import to_artifact as to_artifact

#: Public names of bnc_deploy.api, re-exported on first access.
_API_NAMES = ("load", "export", "profile", "load_runtime", "ExportReport", "ExportResult", "Profile")
#: Public names of bnc_deploy.fit (bnc-fit), re-exported on first access.
_FIT_NAMES = ("fit_to_budget", "FitResult", "InfeasibleBudget")
#: Public names of bnc_deploy.sklearn (extra ``sklearn``), re-exported on first access.
_SKLEARN_NAMES = ("FayyadIraniDiscretizer", "BNClassifier", "DNNClassifier", "to_artifact", "from_artifact")

__all__ = [
    "__version__",
    "load",
    "export",
    "profile",
    "load_runtime",
    "ExportReport",
    "ExportResult",
    "Profile",
    "fit_to_budget",
    "FitResult",
    "InfeasibleBudget",
    "FayyadIraniDiscretizer",
    "BNClassifier",
    "DNNClassifier",
    "to_artifact",
    "from_artifact",
]

#: Sub-packages that the repository keeps at its root (the design card) but installs
#: under ``bnc_deploy`` via setuptools' package-dir mapping.
_ROOT_SUBPACKAGES = ("exporters", "runtimes")


class _SourceTreeFinder(importlib.abc.MetaPathFinder):
    """Resolve ``bnc_deploy.exporters``/``bnc_deploy.runtimes`` in a source checkout.

    An installed copy (``pip install .``) has them inside ``bnc_deploy/``; an editable
    install maps them through setuptools' own finder. Importing straight from a checkout
    (tests run from the root without installing) has neither, so this finder maps them
    to the same files the package-dir mapping installs: every route imports one code.
    """

    def __init__(self, repo_root: Path) -> None:
        self._repo_root = repo_root

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, name = fullname.partition(".")
        if prefix != __name__ or name not in _ROOT_SUBPACKAGES:
            return None
        folder = self._repo_root / name
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def _install_source_tree_finder() -> None:
    here = Path(__file__).resolve().parent
    root = here.parent
    installed_layout = all((here / name).is_dir() for name in _ROOT_SUBPACKAGES)
    source_layout = all((root / name / "__init__.py").is_file() for name in _ROOT_SUBPACKAGES)
    if installed_layout or not source_layout:
        return
    if not any(isinstance(f, _SourceTreeFinder) for f in sys.meta_path):
        sys.meta_path.append(_SourceTreeFinder(root))


_install_source_tree_finder()


def __getattr__(name: str) -> Any:
    """The public API's names, imported on first access (PEP 562) and kept in the module.

    Raises
    ------
    MissingExtraError
        A name of :mod:`bnc_deploy.sklearn` while scikit-learn (extra ``sklearn``) is not installed.
    AttributeError
        Any other unknown name.
    """
    if name in _API_NAMES:
        import bnc_deploy.api

        value = getattr(bnc_deploy.api, name)
    elif name in _FIT_NAMES:
        import bnc_deploy.fit

        value = getattr(bnc_deploy.fit, name)
    elif name in _SKLEARN_NAMES:
        value = getattr(_sklearn_module(name), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def _sklearn_module(name: str) -> Any:
    """:mod:`bnc_deploy.sklearn`, or MissingExtraError naming the ``sklearn`` extra."""
    from bnc_deploy.errors import MissingExtraError

    try:
        import bnc_deploy.sklearn
    except MissingExtraError:
        raise
    except ImportError as exc:
        if (exc.name or "").startswith(__name__):
            raise  # our own module is missing: a broken install, not a missing extra
        raise MissingExtraError(f"{__name__}.{name}", "sklearn", exc) from exc
    return bnc_deploy.sklearn


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
