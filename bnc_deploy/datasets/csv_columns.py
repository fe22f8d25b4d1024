"""The columns of a generic CSV file (:func:`bnc_deploy.datasets.loaders.read_csv`): whether the first
row is a header, which column holds the labels (given by name or index, or chosen: a column named
``label``, ``class`` or ``target``, the only non-numeric first column, else the last), whether that
column looks like class labels at all, and how its tokens become class codes.

Every refusal is a DatasetError naming the file and the column, and saying how to choose another.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .base import DatasetError


def is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def first_row_is_header(rows: list[tuple[int, list[str]]]) -> bool:
    """Header iff some field of the first row is non-numeric where the second row's is numeric
    (a lone row is a header iff none of its fields is numeric)."""
    first = rows[0][1]
    if len(rows) == 1:
        return not any(is_number(t) for t in first)
    second = rows[1][1]
    return any(not is_number(a) and is_number(b) for a, b in zip(first, second))


#: Header names (any case) taken as the label column when none is given.
LABEL_NAMES = ("label", "class", "target")
#: A label column with more distinct values than this fraction of the rows is refused: it looks
#: continuous (a feature) or like an ID, not like class labels.
MAX_CLASS_FRACTION = 0.5
#: How a user chooses the label column (``bnc-train --label-column``, ``read_csv(label_column=...)``).
LABEL_FLAG = "--label-column NAME|INDEX"


def label_index(
    path: Path, label_column: int | str | None, data_row: list[str], header: list[str], has_header: bool
) -> tuple[int, str]:
    """Resolve ``label_column`` (name, 0-based index, or None = auto) against the header / first data
    row; return the column index and how it was chosen (for messages)."""
    n = len(data_row)
    if isinstance(label_column, str):  # a name implies a header (the caller forces has_header)
        if label_column not in header:
            raise DatasetError(f"{path}: no column named {label_column!r} (columns: {header})")
        return header.index(label_column), "the label column given"
    if label_column is None:
        if has_header:
            named = [j for j, name in enumerate(header) if name.strip().lower() in LABEL_NAMES]
            if len(named) > 1:
                raise DatasetError(
                    f"{path}: columns {', '.join(repr(header[j]) for j in named)} could each be "
                    f"the label; choose one with {LABEL_FLAG}"
                )
            if named:
                return named[0], f"named {header[named[0]]!r}"
        # UCI style with the label first (letter-recognition.data): the only non-numeric column
        # is the first one. Otherwise the label is the last column.
        if n > 1 and not is_number(data_row[0]) and all(is_number(t) for t in data_row[1:]):
            return 0, "the first column, the only non-numeric one"
        return n - 1, f"the last column, as no column is named {'/'.join(LABEL_NAMES)}"
    if isinstance(label_column, bool) or not isinstance(label_column, int):
        raise DatasetError(f"{path}: label column must be a column name or a 0-based index, got {label_column!r}")
    if not -n <= label_column < n:
        raise DatasetError(
            f"{path}: label column {label_column} out of range for {n} columns "
            f"(0-based indices 0..{n - 1}, or -1 for the last)"
        )
    return label_column % n, "the label column given"


def _is_whole(token: str) -> bool:
    value = float(token)
    return np.isfinite(value) and value == np.floor(value)


def check_label_column(
    path: Path, name: str, how: str, labels: list[tuple[int, str]], max_class_fraction: float = MAX_CLASS_FRACTION
) -> None:
    """DatasetError naming the column unless ``labels`` (line number, token) look like class labels.

    Refused: a column that mixes numbers and text (a stray ``x`` among numeric labels), numeric
    labels that are not whole numbers, and more distinct values than ``max_class_fraction`` of
    the rows (a continuous feature or an ID). The message says how the column was chosen and
    suggests choosing it explicitly.
    """
    where = f"{path}: label column {name!r} ({how})"
    hint = f"choose the label column with {LABEL_FLAG}"
    numeric = [is_number(token) for _, token in labels]
    if any(numeric) and not all(numeric):
        majority = sum(numeric) * 2 >= len(numeric)  # the odd ones out are the minority type
        odd = next(i for i, is_num in enumerate(numeric) if is_num != majority)
        usual = next(i for i, is_num in enumerate(numeric) if is_num == majority)
        kinds = ("text", "numeric") if majority else ("numeric", "text")
        raise DatasetError(
            f"{where} mixes numbers and text: {kinds[0]} label {labels[odd][1]!r} on line "
            f"{labels[odd][0]} among {kinds[1]} labels such as {labels[usual][1]!r} "
            f"(line {labels[usual][0]}); fix that row, or {hint}"
        )
    if all(numeric):
        fractional = next(((no, t) for no, t in labels if not _is_whole(t)), None)
        if fractional is not None:
            raise DatasetError(
                f"{where} looks continuous: {fractional[1]!r} on line {fractional[0]} is not a "
                f"whole number, and class labels are names or integers; {hint}"
            )
    distinct = len({token for _, token in labels})
    if distinct > max_class_fraction * len(labels):
        raise DatasetError(
            f"{where} has {distinct:,} distinct values in {len(labels):,} rows (more than "
            f"{max_class_fraction:.0%} of the rows): it looks continuous or like an ID, not like "
            f"class labels; {hint}"
        )


def encode_labels(tokens: list[str]) -> tuple[np.ndarray, list[str]]:
    """Codes 0..C-1 of the sorted distinct labels (numeric order when all labels are whole numbers)."""
    try:
        keys = [int(t) for t in tokens]
    except ValueError:
        try:
            keys = [int(float(t)) if _is_whole(t) else t for t in tokens]  # "2.0": class 2
            if not all(isinstance(k, int) for k in keys):
                keys = tokens
        except (ValueError, OverflowError):
            keys = tokens
    classes = sorted(set(keys))
    index = {c: i for i, c in enumerate(classes)}
    return np.array([index[k] for k in keys], dtype=np.int64), [str(c) for c in classes]
