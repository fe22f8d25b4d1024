"""bnc-deploy: few-bit Bayesian network classifiers and quantized DNNs, from training to devices.

Data flows one way::

    datasets/discretize -> train (torch) -> model artifact -> exporters -> runtimes -> profiler

``bnc_deploy.exporters`` and ``bnc_deploy.runtimes`` live in the repository's top-level
``exporters/`` and ``runtimes/`` folders; setuptools installs them under ``bnc_deploy``.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

from bnc_deploy.version import __version__ as __version__  # re-exported

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
