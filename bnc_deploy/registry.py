"""The one rule of every registry (exporters, runtimes, trainers, model-file kinds, reference
predictors, cost models): a name is registered once. A second registration of a taken name raises
:class:`~bnc_deploy.errors.ConfigError` unless the caller passes ``overwrite=True``, so two modules
that claim one name cannot leave whichever was imported last, silently (skl2onnx's converter
registry does the same).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

from bnc_deploy.errors import ConfigError

Key = TypeVar("Key", bound=Hashable)


def claim(table: Mapping[Key, object], key: Key, *, what: str, overwrite: bool = False, detail: str = "") -> None:
    """Allow registering ``key`` in ``table``: ConfigError naming ``what`` (e.g. "runtime 'numpy'")
    and ``detail`` (who registered it) when it is taken and ``overwrite`` is False."""
    if key in table and not overwrite:
        raise ConfigError(f"{what} is already registered{detail}; pass overwrite=True to replace it")


__all__ = ["claim"]
