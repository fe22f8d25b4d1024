"""File-format loaders.

Raw loaders return ``RawData`` (continuous or integer features, labels, names); splitting and
discretization happen in ``splits``. Already-discrete sources (the paper's npz files, scikit-learn's
digits) return a ``DiscreteDataset`` directly. Every malformed input raises ``DatasetError`` naming
the file and the problem (line, column, key, shape or value). Which row of a generic CSV file
is a header and which column holds its labels is :mod:`bnc_deploy.datasets.csv_columns`.
"""

from __future__ import annotations

import csv
import string
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bnc_deploy.errors import MissingExtraError

from .base import DatasetError, DiscreteDataset
from .csv_columns import MAX_CLASS_FRACTION, check_label_column, encode_labels, first_row_is_header, label_index
from .resize import imresize

LETTER_CLASSES = list(string.ascii_uppercase)
#: UCI letter-recognition attribute names, in file order.
LETTER_FEATURES = [
    "x-box",
    "y-box",
    "width",
    "high",
    "onpix",
    "x-bar",
    "y-bar",
    "x2bar",
    "y2bar",
    "xybar",
    "x2ybr",
    "xy2br",
    "x-ege",
    "xegvy",
    "y-ege",
    "yegvx",
]
#: Statlog satimage labels in file order (6 "mixture" is absent from the data) and the paper's names.
SATIMAGE_LABELS = (1, 2, 3, 4, 5, 7)
SATIMAGE_CLASSES = [
    "red soil",
    "cotton crop",
    "grey soil",
    "damp grey soil",
    "soil with vegetation stubble",
    "very damp grey soil",
]
# Each satimage row lists the 4 spectral bands of pixel 1 of the 3x3 patch, then of pixel 2, ...
SATIMAGE_FEATURES = [f"pixel{p}_band{b}" for p in range(1, 10) for b in range(1, 5)]
#: usps_all.mat block k holds digit (k + 1) % 10; label t = k, as in the paper's usps.npz.
USPS_CLASSES = [str((k + 1) % 10) for k in range(10)]
#: USPS pixels in column-major order: feature j is image row j % 16, column j // 16.
USPS_FEATURES = [f"pixel_r{j % 16}_c{j // 16}" for j in range(256)]
MNIST_SIDE = 28
MNIST_DOWNSCALED_SIDE = 14


@dataclass
class RawData:
    """Features before discretization, all rows in one array (the split comes later; a source's
    own fixed split is kept as ``n_train``).

    Attributes
    ----------
    x : ndarray of shape (n_rows, n_features), float64, finite
    y : ndarray of shape (n_rows,), int64 in ``0 .. len(class_names) - 1``
    class_names, feature_names : list of str
    source : str
        The file(s) read.
    info : dict
        Preprocessing facts (e.g. downscaling), copied into the dataset's ``info``.
    n_train : int or None
        When the source comes with a fixed train/test split (MNIST's 60,000 / 10,000): rows
        ``0 .. n_train - 1`` are its training part and the rest its test part, for
        ``splits.TRAIN_TEST_PROTOCOL``. None when the rows are just pooled.
    """

    x: np.ndarray
    y: np.ndarray
    class_names: list[str]
    feature_names: list[str]
    source: str
    info: dict
    n_train: int | None = None


# -- text tables ------------------------------------------------------------------------------
def _read_lines(path: Path) -> list[tuple[int, str]]:
    """Non-blank lines of a text file with their 1-based line numbers."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read ({exc})") from None
    return [(no, line.strip()) for no, line in enumerate(text.splitlines(), 1) if line.strip()]


def _parse_float(path: Path, line_no: int, column: int | str, token: str) -> float:
    """``float(token)``, or DatasetError naming file, line, column and token; rejects NaN/inf."""
    try:
        value = float(token)
    except ValueError:
        raise DatasetError(f"{path}: line {line_no}, column {column}: non-numeric value {token!r}") from None
    if not np.isfinite(value):
        raise DatasetError(f"{path}: line {line_no}, column {column}: non-finite value {token!r}")
    return value


def _split_rows(path: Path, sep: str | None, n_columns: int) -> list[tuple[int, list[str]]]:
    """Tokenised non-blank lines, each checked to have ``n_columns`` fields."""
    rows = []
    for no, line in _read_lines(path):
        fields = [f.strip() for f in line.split(sep)]
        if len(fields) != n_columns:
            raise DatasetError(f"{path}: line {no}: expected {n_columns} columns, got {len(fields)}")
        rows.append((no, fields))
    if not rows:
        raise DatasetError(f"{path}: no data rows")
    return rows


# -- UCI letter -------------------------------------------------------------------------------
def read_letter(path: str | Path) -> RawData:
    """UCI letter-recognition: ``letter,16 ints`` per line, no header; classes A..Z -> 0..25.

    Returns RawData with x of shape (n_rows, 16).
    """
    path = Path(path)
    n_features = len(LETTER_FEATURES)
    x, y = [], []
    for no, fields in _split_rows(path, ",", n_features + 1):
        if fields[0] not in LETTER_CLASSES:
            raise DatasetError(f"{path}: line {no}: unknown label {fields[0]!r}, expected one of A..Z")
        y.append(LETTER_CLASSES.index(fields[0]))
        x.append([_parse_float(path, no, j + 2, t) for j, t in enumerate(fields[1:])])
    return RawData(
        np.array(x, dtype=np.float64),
        np.array(y, dtype=np.int64),
        list(LETTER_CLASSES),
        list(LETTER_FEATURES),
        str(path),
        {},
    )


# -- Statlog satimage -------------------------------------------------------------------------
def read_satimage_file(path: str | Path) -> RawData:
    """One Statlog satimage file (``sat.trn`` or ``sat.tst``): 36 ints and a class, space-separated.

    Classes 1,2,3,4,5,7 map to 0..5. Returns RawData with x of shape (n_rows, 36).
    """
    path = Path(path)
    x, y = [], []
    for no, fields in _split_rows(path, None, 37):
        label = _parse_float(path, no, 37, fields[-1])
        if label not in SATIMAGE_LABELS:
            raise DatasetError(f"{path}: line {no}: unknown class {fields[-1]!r}, expected one of {SATIMAGE_LABELS}")
        y.append(SATIMAGE_LABELS.index(int(label)))
        x.append([_parse_float(path, no, j + 1, t) for j, t in enumerate(fields[:-1])])
    return RawData(
        np.array(x, dtype=np.float64),
        np.array(y, dtype=np.int64),
        list(SATIMAGE_CLASSES),
        list(SATIMAGE_FEATURES),
        str(path),
        {},
    )


def read_satimage(train_path: str | Path, test_path: str | Path) -> RawData:
    """``sat.trn`` and ``sat.tst`` pooled (train rows first): the paper cross-validates over all 6,435."""
    parts = [read_satimage_file(train_path), read_satimage_file(test_path)]
    return RawData(
        np.concatenate([p.x for p in parts]),
        np.concatenate([p.y for p in parts]),
        list(SATIMAGE_CLASSES),
        list(SATIMAGE_FEATURES),
        f"{train_path}+{test_path}",
        {"pooled": "sat.trn + sat.tst"},
    )


# -- USPS 11k (MATLAB) ------------------------------------------------------------------------
def read_usps_mat(path: str | Path) -> RawData:
    """``usps_all.mat``: variable ``data`` uint8 of shape (256, n_per_class, 10).

    Block ``k`` holds digit ``(k + 1) % 10`` and gets label ``k`` (the paper's usps.npz convention:
    label 0 is digit 1, ..., label 9 is digit 0). Pixels stay in the file's column-major order
    (feature ``j`` is image row ``j % 16``, column ``j // 16``), as in the paper's usps.npz.
    Rows are block 0's images, then block 1's, ...

    Returns RawData with x of shape (10 * n_per_class, 256).
    """
    try:
        import scipy.io  # local: only this loader needs scipy
    except ImportError as exc:
        raise MissingExtraError("reading a MATLAB .mat dataset", "data", exc) from None

    path = Path(path)
    try:
        contents = scipy.io.loadmat(str(path))
    except Exception as exc:  # scipy raises many types (ValueError, MatReadError, OSError, ...)
        raise DatasetError(f"{path}: cannot read as a MATLAB file ({exc})") from None
    if "data" not in contents:
        names = sorted(k for k in contents if not k.startswith("__"))
        raise DatasetError(f"{path}: no variable 'data' (found {names})")
    data = np.asarray(contents["data"])
    if data.ndim != 3 or data.shape[0] != 256 or data.shape[2] != 10:
        raise DatasetError(f"{path}: variable 'data' must have shape (256, n, 10), got {data.shape}")
    if not np.issubdtype(data.dtype, np.number):
        raise DatasetError(f"{path}: variable 'data' must be numeric, got {data.dtype}")
    n_per_class = data.shape[1]
    x = data.transpose(2, 1, 0).reshape(-1, 256).astype(np.float64)
    y = np.repeat(np.arange(10, dtype=np.int64), n_per_class)
    return RawData(
        x,
        y,
        list(USPS_CLASSES),
        list(USPS_FEATURES),
        str(path),
        {"pixel_order": "column-major", "label": "block index k (digit (k + 1) % 10)"},
    )


# -- MNIST ------------------------------------------------------------------------------------
def downscale_by_two(images: np.ndarray) -> np.ndarray:
    """Average 2x2 blocks: shape (n, h, w) with even h, w -> (n, h // 2, w // 2), float64.

    This is linear (bilinear) downscaling by exactly 2 with pixel-centre alignment: each output
    centre lies midway between two input centres on both axes, so its bilinear weights are 1/4
    on the four pixels of its 2x2 block.
    """
    # Four strided slices instead of reshape().mean(): ~25x faster on 70,000 MNIST images.
    total = images[:, 0::2, 0::2].astype(np.float64)
    total += images[:, 1::2, 0::2]
    total += images[:, 0::2, 1::2]
    total += images[:, 1::2, 1::2]
    return total / 4.0


def _npz_array(path: Path, archive, key: str) -> np.ndarray:
    try:
        return np.asarray(archive[key])
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"{path}: cannot read array {key!r} ({exc})") from None


def _open_npz(path: Path):
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"{path}: cannot read as .npz ({exc})") from None


def _require_keys(path: Path, archive, keys: list[str]) -> None:
    missing = [k for k in keys if k not in archive.files]
    if missing:
        raise DatasetError(f"{path}: missing keys {missing} (found {sorted(archive.files)})")


MNIST_KEYS = ["x_train", "y_train", "x_test", "y_test"]


def _read_mnist_parts(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{"train": (x, y), "test": (x, y)}`` of an MNIST npz, checked: images (n, 28, 28) of finite
    numbers, labels (n,) digits 0..9 (returned as int64)."""
    with _open_npz(path) as archive:
        _require_keys(path, archive, MNIST_KEYS)
        arrays = {k: _npz_array(path, archive, k) for k in MNIST_KEYS}
    parts = {}
    for part in ("train", "test"):
        x, y = arrays[f"x_{part}"], arrays[f"y_{part}"]
        if x.ndim != 3 or x.shape[1:] != (MNIST_SIDE, MNIST_SIDE):
            raise DatasetError(f"{path}: x_{part} must have shape (n, 28, 28), got {x.shape}")
        if y.shape != (x.shape[0],):
            raise DatasetError(f"{path}: y_{part} must have shape ({x.shape[0]},), got {y.shape}")
        if not (np.issubdtype(x.dtype, np.number) and np.all(np.isfinite(x))):
            raise DatasetError(f"{path}: x_{part} must hold finite numbers (dtype {x.dtype})")
        bad = ~np.isin(y, np.arange(10))
        if bad.any():
            row = int(np.argmax(bad))
            raise DatasetError(f"{path}: y_{part} row {row} has label {y[row].item()!r}, expected a digit 0..9")
        parts[part] = (x, y.astype(np.int64))
    return parts


def read_mnist_npz(path: str | Path) -> RawData:
    """MNIST npz (keys ``x_train``, ``y_train``, ``x_test``, ``y_test``; images (n, 28, 28)), read the
    way the ``mnist-mean2x2`` dataset uses it (the toolkit's original MNIST, not the paper's).

    All 70,000 images are pooled (train first, ``n_train`` None: the split is re-drawn),
    downscaled to 14x14 (``downscale_by_two``) and flattened row-major: feature ``j`` is row
    ``j // 14``, column ``j % 14``. See :func:`read_mnist_bicubic` for the paper's preprocessing.

    Returns RawData with x of shape (n_rows, 196) and labels 0..9 (the digit).
    """
    path = Path(path)
    parts = _read_mnist_parts(path)
    xs = [downscale_by_two(x).reshape(x.shape[0], -1) for x, _ in parts.values()]
    side = MNIST_DOWNSCALED_SIDE
    feature_names = [f"pixel_r{j // side}_c{j % side}" for j in range(side * side)]
    return RawData(
        np.concatenate(xs),
        np.concatenate([y for _, y in parts.values()]),
        [str(d) for d in range(10)],
        feature_names,
        str(path),
        {
            "downscale": "28x28 -> 14x14, linear (mean of 2x2 blocks)",
            "pixel_order": "row-major",
            "pooled": "x_train + x_test",
        },
    )


#: MNIST's 14x14 features in column-major order, as the paper's (MATLAB) files: feature j is
#: image row j % 14, column j // 14.
MNIST_FEATURES = [
    f"pixel_r{j % MNIST_DOWNSCALED_SIDE}_c{j // MNIST_DOWNSCALED_SIDE}" for j in range(MNIST_DOWNSCALED_SIDE**2)
]


def read_mnist_bicubic(path: str | Path) -> RawData:
    """MNIST npz preprocessed as the paper's MNIST (the ``mnist`` dataset).

    Each 28x28 image is resized to 14x14 as MATLAB's ``imresize(I, 0.5)`` does it (bicubic,
    antialiased, symmetric borders; float64, not rounded: :func:`bnc_deploy.datasets.resize.imresize`)
    and flattened column-major (MATLAB's ``I(:)``): feature ``j`` is row ``j % 14``, column
    ``j // 14``. This reproduces the paper's 13.1 values per feature and ~25,800 naive Bayes
    parameters once Fayyad-Irani is fitted on the training images; the 2x2 mean of
    :func:`read_mnist_npz` gives 4.5 values per feature.

    Rows are the file's ``x_train`` then ``x_test``, with ``n_train = len(x_train)``: MNIST's
    standard split (``splits.TRAIN_TEST_PROTOCOL``), not a re-drawn one.

    Returns RawData with x of shape (n_train + n_test, 196) and labels 0..9 (the digit).
    """
    path = Path(path)
    parts = _read_mnist_parts(path)
    # (n, row, col) -> (n, col, row) -> flat: index col * 14 + row, i.e. Fortran order per image.
    xs = [imresize(x, 0.5).transpose(0, 2, 1).reshape(x.shape[0], -1) for x, _ in parts.values()]
    n_train = parts["train"][0].shape[0]
    return RawData(
        np.concatenate(xs),
        np.concatenate([y for _, y in parts.values()]),
        [str(d) for d in range(10)],
        list(MNIST_FEATURES),
        str(path),
        {
            "downscale": "28x28 -> 14x14, bicubic antialiased as MATLAB imresize(I, 0.5) "
            "(Keys a=-0.5, symmetric borders, float, unrounded)",
            "pixel_order": "column-major",
            "split": f"standard: x_train ({n_train:,} rows) trains, x_test ({parts['test'][0].shape[0]:,} rows) tests",
        },
        n_train=n_train,
    )


def is_mnist_npz(path: str | Path) -> bool:
    """Whether an npz file has the MNIST keys (and so is not in the paper's fold format)."""
    with _open_npz(Path(path)) as archive:
        return all(k in archive.files for k in MNIST_KEYS)


# -- generic CSV ------------------------------------------------------------------------------
def read_csv(
    path: str | Path,
    label_column: int | str | None = None,
    delimiter: str = ",",
    *,
    max_class_fraction: float = MAX_CLASS_FRACTION,
) -> RawData:
    """Numeric feature columns plus one label column.

    The first row is a header when one of its fields is non-numeric where the second row's is
    numeric (or when the label column is given by name). ``label_column`` is a header name or a
    0-based index (negative from the end); ``None`` picks the column named ``label``, ``class`` or
    ``target`` (any case), else the first column of UCI-style files whose first column is the only
    non-numeric one (label first), else the last column.

    The label column is checked (:func:`~bnc_deploy.datasets.csv_columns.check_label_column`): a
    column that mixes numbers and text, holds non-whole numbers, or has more distinct values than
    ``max_class_fraction`` of the rows is refused with a DatasetError naming it. Labels may be
    strings; class names are the sorted distinct labels (whole numbers sorted numerically).

    Returns RawData with x of shape (n_rows, n_columns - 1).
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            records = enumerate(csv.reader(handle, delimiter=delimiter), 1)
            rows = [(no, [f.strip() for f in fields]) for no, fields in records if any(f.strip() for f in fields)]
    except IsADirectoryError:
        raise DatasetError(f"{path}: is a directory, not a CSV file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DatasetError(f"{path}: cannot read as CSV ({exc})") from None
    if not rows:
        raise DatasetError(f"{path}: empty file")
    first = rows[0][1]
    if len(first) < 2:
        raise DatasetError(f"{path}: line {rows[0][0]}: need at least one feature column and a label column")
    has_header = isinstance(label_column, str) or first_row_is_header(rows)
    data = rows[1:] if has_header else rows
    if not data:
        raise DatasetError(f"{path}: no data rows after the header")
    header = first if has_header else [f"x{j}" for j in range(len(first))]
    label, how = label_index(path, label_column, data[0][1], header, has_header)
    features = [j for j in range(len(first)) if j != label]
    x, labels = [], []
    for no, fields in data:
        if len(fields) != len(first):
            raise DatasetError(f"{path}: line {no}: expected {len(first)} columns, got {len(fields)}")
        x.append([_parse_float(path, no, header[j], fields[j]) for j in features])
        labels.append((no, fields[label]))
    check_label_column(path, header[label], how if has_header else f"{how}, index {label}", labels, max_class_fraction)
    y, class_names = encode_labels([token for _, token in labels])
    return RawData(
        np.array(x, dtype=np.float64),
        y,
        class_names,
        [header[j] for j in features],
        str(path),
        {"label_column": header[label]},
    )


# -- already discrete -------------------------------------------------------------------------
def _paper_fold(path: Path, archive, fold: int) -> dict[str, np.ndarray]:
    """The four arrays of one fold, checked for shapes and integer dtype."""
    keys = [f"x_tr_fold{fold}", f"t_tr_fold{fold}", f"x_te_fold{fold}", f"t_te_fold{fold}"]
    _require_keys(path, archive, keys)
    arrays = dict(zip(("x_train", "y_train", "x_test", "y_test"), (_npz_array(path, archive, k) for k in keys)))
    for key, arr in zip(keys, arrays.values()):
        if not np.issubdtype(arr.dtype, np.integer):
            raise DatasetError(f"{path}: {key} must hold integers, got dtype {arr.dtype}")
        _check_fits_int64(path, key, arr)
    for part, (xk, tk) in {"train": keys[:2], "test": keys[2:]}.items():
        x, t = arrays[f"x_{part}"], arrays[f"y_{part}"]
        if x.ndim != 2 or t.shape != (x.shape[0],):
            raise DatasetError(f"{path}: {xk} must be 2-D and {tk} 1-D with as many rows, got {x.shape} and {t.shape}")
    if arrays["x_train"].shape[1] != arrays["x_test"].shape[1]:
        raise DatasetError(
            f"{path}: fold {fold}: {arrays['x_train'].shape[1]} training features "
            f"but {arrays['x_test'].shape[1]} test features"
        )
    return arrays


def _paper_n_folds(path: Path, archive) -> int:
    _require_keys(path, archive, ["n_folds"])
    n_folds = _npz_array(path, archive, "n_folds")
    if n_folds.size != 1 or not np.issubdtype(n_folds.dtype, np.integer) or int(n_folds) < 1:
        raise DatasetError(f"{path}: n_folds must be one positive integer, got {n_folds!r}")
    return int(n_folds)


def _check_fits_int64(path: Path, key: str, arr: np.ndarray) -> None:
    """DatasetError naming the value when an unsigned array holds one above 2^63 - 1 (it would wrap)."""
    if arr.size and np.issubdtype(arr.dtype, np.unsignedinteger) and arr.max() > np.iinfo(np.int64).max:
        index = tuple(int(i) for i in np.unravel_index(np.argmax(arr > np.iinfo(np.int64).max), arr.shape))
        raise DatasetError(
            f"{path}: {key} holds {arr[index].item()} at index {index[0] if len(index) == 1 else index}, "
            f"far outside any code or label range"
        )


def _paper_n_classes(path: Path, archive, n_folds: int) -> int:
    """1 + the largest label of any fold; DatasetError for a negative label or one that cannot be a
    class index (not below the number of labelled rows in the file)."""
    labels = {
        key: _npz_array(path, archive, key)
        for key in (f"t_{p}_fold{k}" for k in range(1, n_folds + 1) for p in ("tr", "te"))
        if key in archive.files
    }
    n_rows = sum(t.size for t in labels.values())
    largest = 0
    for key, t in labels.items():
        if not np.issubdtype(t.dtype, np.integer):
            raise DatasetError(f"{path}: {key} must hold integers, got dtype {t.dtype}")
        if not t.size:
            continue
        low, high = t.min().item(), t.max().item()
        if low < 0 or high >= max(n_rows, 2):
            value, row = (low, int(np.argmin(t.ravel()))) if low < 0 else (high, int(np.argmax(t.ravel())))
            raise DatasetError(
                f"{path}: {key} row {row} has label {value}; labels must be class indices "
                f"0..C-1 (the file has {n_rows:,} labelled rows)"
            )
        largest = max(largest, high)
    return 1 + largest


def _check_one_based(path: Path, fold: int, part: str, x: np.ndarray, cardinalities: np.ndarray) -> None:
    """Raise DatasetError naming fold/feature/value when a 1-based code is 0 or above the cardinality."""
    bad = (x < 1) | (x > cardinalities[None, :])
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise DatasetError(
            f"{path}: fold {fold} {part} row {row}, feature {col}: value {x[row, col].item()} "
            f"outside the 1-based range 1..{int(cardinalities[col])} (cardinality from the "
            f"fold's training values)"
        )


def load_paper_npz(
    path: str | Path,
    fold: int = 1,
    *,
    name: str | None = None,
    class_names: list[str] | None = None,
    feature_names: list[str] | None = None,
) -> DiscreteDataset:
    """The paper's discretized npz (keys ``x_tr_fold{k}``, ``t_tr_fold{k}``, ``x_te_fold{k}``,
    ``t_te_fold{k}``, ``n_folds``; feature values 1-based, labels 0-based).

    Values are shifted to 0-based. The cardinality of feature ``i`` is the maximum of its 1-based
    values in the fold's training part (this reproduces the paper's parameter counts); a test
    value above it raises DatasetError. ``fold`` is 1-based.
    """
    path = Path(path)
    with _open_npz(path) as archive:
        n_folds = _paper_n_folds(path, archive)
        if not 1 <= fold <= n_folds:
            raise DatasetError(f"{path}: fold {fold} out of range, valid folds are 1..{n_folds}")
        arrays = _paper_fold(path, archive, fold)
        # Classes are counted over all folds so every fold of a file has the same label set.
        n_classes = _paper_n_classes(path, archive, n_folds)
    x_train, x_test = arrays["x_train"].astype(np.int64), arrays["x_test"].astype(np.int64)
    if x_train.shape[0] == 0:
        raise DatasetError(f"{path}: fold {fold} has no training rows")
    cardinalities = x_train.max(axis=0)
    _check_one_based(path, fold, "train", x_train, cardinalities)
    _check_one_based(path, fold, "test", x_test, cardinalities)
    n_features = x_train.shape[1]
    class_names = class_names or [str(c) for c in range(n_classes)]
    feature_names = feature_names or [f"x{j}" for j in range(n_features)]
    if len(feature_names) != n_features or len(class_names) < n_classes:
        raise DatasetError(
            f"{path}: {n_features} features and {n_classes} classes, but names for "
            f"{len(feature_names)} features and {len(class_names)} classes"
        )
    return DiscreteDataset(
        name=name or path.stem,
        x_train=x_train - 1,
        y_train=arrays["y_train"],
        x_test=x_test - 1,
        y_test=arrays["y_test"],
        cardinalities=cardinalities,
        class_names=list(class_names),
        feature_names=list(feature_names),
        fold=fold,
        n_folds=n_folds,
        source=str(path),
        info={
            "protocol": "paper's published folds",
            "discretization": "Fayyad-Irani MDL (published by the authors)",
            "values_in_file": "1-based (shifted to 0-based)",
        },
    )


DIGITS_CARDINALITY = 17  # scikit-learn digits: pixel counts 0..16 of a 4x4 block


def read_digits() -> RawData:
    """scikit-learn's 8x8 digits (1,797 rows, values 0..16), bundled with scikit-learn.

    Returns RawData with integer-valued x of shape (1797, 64) and labels 0..9.
    """
    try:
        from sklearn.datasets import load_digits  # local: scikit-learn is slow to import
    except ImportError as exc:
        raise MissingExtraError("the built-in digits dataset", "data", exc) from None

    bunch = load_digits()
    return RawData(
        bunch.data.astype(np.float64),
        bunch.target.astype(np.int64),
        [str(c) for c in bunch.target_names],
        list(bunch.feature_names),
        "sklearn:digits",
        {"value_range": f"0..{DIGITS_CARDINALITY - 1} (declared, not learned)"},
    )
