"""Datasets: one type (``DiscreteDataset``) and one entry point (``load_dataset``).

Names (files under the data directory, see ``find_data_dir``):

============== ==================================================== =====================
name           source                                               protocol
============== ==================================================== =====================
digits         scikit-learn's 8x8 digits (values 0..16, no cuts)    2/3-1/3, seeded
letter         discretized/letter.npz (the paper's exact inputs)    the file's fold
satimage       discretized/satimage.npz                             the file's 5 folds
usps           discretized/usps.npz                                 the file's fold
letter-raw     raw/letter/letter-recognition.data                   2/3-1/3 + Fayyad-Irani
satimage-raw   raw/satimage/sat.trn + sat.tst (pooled)              5-fold CV + Fayyad-Irani
usps-raw       raw/usps/usps_all.mat                                2/3-1/3 + Fayyad-Irani
mnist          raw/mnist/mnist.npz, 14x14 bicubic as MATLAB's       standard 60,000/10,000
               imresize, column-major (the paper's preprocessing)   + Fayyad-Irani
mnist-mean2x2  raw/mnist/mnist.npz (pooled, 2x2 means, row-major)   2/3-1/3 + Fayyad-Irani
============== ==================================================== =====================

A path works too: ``.npz`` (paper fold format, or MNIST-style keys: read as ``mnist``, so a file
named ``mnist.npz`` gives the same data, and the same image layout, as the name), ``.csv``/``.data``
(generic CSV; the label column is chosen as :func:`bnc_deploy.datasets.loaders.read_csv` says, or by
``label_column``), ``.mat`` (the usps_all.mat layout). Raw files are split and discretized.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from bnc_deploy.errors import ConfigError
from bnc_deploy.fileio import find_folder

from . import loaders, splits
from .base import DatasetError, DiscreteDataset

__all__ = [
    "DiscreteDataset",
    "DatasetError",
    "load_dataset",
    "dataset_names",
    "find_data_dir",
    "DATA_DIR_ENV",
    "check_validation_fraction",
]

DATA_DIR_ENV = "BNC_DEPLOY_DATA_DIR"
_RELATIVE_DATA_DIR = Path("..") / "shared" / "datasets"


def find_data_dir(data_dir: str | Path | None = None) -> Path:
    """The folder holding ``discretized/`` and ``raw/``.

    Order: ``data_dir``, else ``$BNC_DEPLOY_DATA_DIR``, else the first existing of
    ``../shared/datasets`` relative to the current directory and to the repository root.
    Raises DatasetError listing every place searched.
    """
    found, how, searched = find_folder(data_dir, DATA_DIR_ENV, _RELATIVE_DATA_DIR, "the data_dir argument")
    if found is not None:
        return found
    raise DatasetError(
        f"dataset folder not found (searched {how}: {searched}); pass data_dir=... "
        f"or set {DATA_DIR_ENV} to the folder holding discretized/ and raw/"
    )


def _named_file(data_dir: Path, relative: str) -> Path:
    path = data_dir / relative
    if path.is_dir():
        raise DatasetError(f"{path}: is a directory, not a data file (data directory {data_dir})")
    if not path.is_file():
        raise DatasetError(f"{path}: file not found (data directory {data_dir})")
    return path


def _paper(stem: str, class_names: list[str], feature_names: list[str]) -> Callable:
    def load(data_dir: Path, fold: int, seed: int) -> DiscreteDataset:
        return loaders.load_paper_npz(
            _named_file(data_dir, f"discretized/{stem}.npz"),
            fold,
            name=stem,
            class_names=class_names,
            feature_names=feature_names,
        )

    return load


def _raw(name: str, read: Callable[[Path], loaders.RawData], files: list[str], protocol: str) -> Callable:
    def load(data_dir: Path, fold: int, seed: int) -> DiscreteDataset:
        raw = read(*(_named_file(data_dir, f) for f in files))
        return splits.discretize_split(name, raw, protocol, fold=fold, seed=seed)

    return load


def _digits(data_dir: Path | None, fold: int, seed: int) -> DiscreteDataset:
    return splits.discrete_split(
        "digits", loaders.read_digits(), loaders.DIGITS_CARDINALITY, splits.HOLDOUT_PROTOCOL, fold=fold, seed=seed
    )


#: name -> loader(data_dir, fold, seed); digits needs no data directory.
_NAMED: dict[str, Callable] = {
    "digits": _digits,
    "letter": _paper("letter", loaders.LETTER_CLASSES, loaders.LETTER_FEATURES),
    "satimage": _paper("satimage", loaders.SATIMAGE_CLASSES, loaders.SATIMAGE_FEATURES),
    "usps": _paper("usps", loaders.USPS_CLASSES, loaders.USPS_FEATURES),
    "letter-raw": _raw(
        "letter-raw", loaders.read_letter, ["raw/letter/letter-recognition.data"], splits.HOLDOUT_PROTOCOL
    ),
    "satimage-raw": _raw(
        "satimage-raw", loaders.read_satimage, ["raw/satimage/sat.trn", "raw/satimage/sat.tst"], splits.CV_PROTOCOL
    ),
    "usps-raw": _raw("usps-raw", loaders.read_usps_mat, ["raw/usps/usps_all.mat"], splits.HOLDOUT_PROTOCOL),
    "mnist": _raw("mnist", loaders.read_mnist_bicubic, ["raw/mnist/mnist.npz"], splits.TRAIN_TEST_PROTOCOL),
    "mnist-mean2x2": _raw("mnist-mean2x2", loaders.read_mnist_npz, ["raw/mnist/mnist.npz"], splits.HOLDOUT_PROTOCOL),
}


def dataset_names() -> list[str]:
    """The names ``load_dataset`` knows (besides file paths)."""
    return list(_NAMED)


#: Suffixes of the files that have a label column to choose (generic CSV).
CSV_SUFFIXES = (".csv", ".data")


def _load_path(path: Path, fold: int, seed: int, label_column: int | str | None = None) -> DiscreteDataset:
    """A dataset file given by path, dispatched on its suffix (and an npz's keys)."""
    if path.is_dir():
        raise DatasetError(f"{path}: is a directory; give a dataset file (.npz, .csv, .data, .mat) or a name")
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    suffix = path.suffix.lower()
    if label_column is not None and suffix not in CSV_SUFFIXES:
        raise DatasetError(
            f"{path}: a label column ({label_column!r}) applies only to CSV files "
            f"({', '.join(CSV_SUFFIXES)}); this file's labels are fixed by its format"
        )
    if suffix in CSV_SUFFIXES:
        return splits.discretize_split(
            path.stem, loaders.read_csv(path, label_column), splits.HOLDOUT_PROTOCOL, fold=fold, seed=seed
        )
    if suffix == ".npz":
        if loaders.is_mnist_npz(path):
            # As the named ``mnist``: the CNN's image layout is looked up by name (the file's stem),
            # so ``path/to/mnist.npz`` must give the same pixel order as ``mnist``.
            return splits.discretize_split(
                path.stem, loaders.read_mnist_bicubic(path), splits.TRAIN_TEST_PROTOCOL, fold=fold, seed=seed
            )
        return loaders.load_paper_npz(path, fold)
    readers = {".mat": loaders.read_usps_mat}
    if suffix not in readers:
        raise DatasetError(f"{path}: unsupported file type {suffix!r}, expected .npz, .csv, .data or .mat")
    return splits.discretize_split(path.stem, readers[suffix](path), splits.HOLDOUT_PROTOCOL, fold=fold, seed=seed)


def _looks_like_path(spec: str) -> bool:
    return os.sep in spec or "/" in spec or Path(spec).suffix.lower() in {".npz", ".csv", ".data", ".mat"}


def load_dataset(
    spec: str | Path,
    *,
    fold: int = 1,
    seed: int = 0,
    validation_fraction: float = 0.0,
    data_dir: str | Path | None = None,
    label_column: int | str | None = None,
) -> DiscreteDataset:
    """Load one fold of a dataset as a ``DiscreteDataset``.

    Parameters
    ----------
    spec : str or Path
        A name from ``dataset_names()`` or a path to a ``.npz``, ``.csv``, ``.data`` or ``.mat`` file.
    fold : int
        1-based fold (1 for hold-out datasets, 1..5 for satimage).
    seed : int
        Seed of the split permutation (raw data and digits; the paper's npz folds are fixed).
    validation_fraction : float
        0 (no validation split), or a fraction in (0, 1) of the training rows that moves to
        ``x_val``/``y_val`` (seeded by ``seed``); anything else raises ConfigError.
    data_dir : path, optional
        Folder with ``discretized/`` and ``raw/`` for named datasets (see ``find_data_dir``).
    label_column : str or int, optional
        CSV files only: the label column's header name or 0-based index (default: see
        :func:`~bnc_deploy.datasets.loaders.read_csv`). DatasetError for any other dataset.
    """
    check_validation_fraction(validation_fraction)
    if isinstance(fold, bool) or not isinstance(fold, int):
        raise DatasetError(f"fold must be an integer, got {fold!r}")
    spec_str = str(spec)
    if isinstance(spec, Path) or (spec_str not in _NAMED and _looks_like_path(spec_str)):
        dataset = _load_path(Path(spec), fold, seed, label_column)
    elif spec_str in _NAMED:
        if label_column is not None:
            raise DatasetError(
                f"a label column ({label_column!r}) applies only to CSV files (.csv, .data), "
                f"not to the named dataset {spec_str!r}"
            )
        where = None if spec_str == "digits" else find_data_dir(data_dir)
        dataset = _NAMED[spec_str](where, fold, seed)
    elif Path(spec_str).is_dir():
        raise DatasetError(
            f"{spec_str}: is a directory; give a dataset file (.npz, .csv, .data, .mat) or a name "
            f"({', '.join(dataset_names())})"
        )
    else:
        raise DatasetError(
            f"unknown dataset {spec_str!r}; known names: {', '.join(dataset_names())}, "
            f"or a path to a .npz/.csv/.data/.mat file"
        )
    if validation_fraction:
        dataset = dataset.with_validation(validation_fraction, seed)
    return dataset


def check_validation_fraction(fraction: float, flag: str = "validation fraction") -> None:
    """ConfigError unless ``fraction`` is 0 (no validation split) or in the open interval (0, 1)."""
    if not (fraction == 0 or 0 < fraction < 1):
        raise ConfigError(
            f"{flag} must be in (0, 1) (a fraction of the training rows; 0 for no validation split), got {fraction}"
        )
