"""The results table of a sweep directory: ``DIR/results.sqlite``, transactional and resumable.

Contract
--------
* **Durability.** Rows are written by :meth:`ResultsTable.add`, one SQLite transaction per call
  (a batch of rows), in WAL mode with ``synchronous = FULL``. A process killed at any moment
  (``kill -9``, a power cut) leaves every batch whose ``add`` returned, and nothing of the batch
  in flight: there is no half-written row and no half-written batch. Reopening the directory
  recovers the WAL automatically.
* **One writer.** The sweep driver is the only process that writes a directory's table; readers
  (a status command, a notebook) may open it at the same time. Connections wait up to
  ``timeout`` seconds for a lock instead of failing at once. Two drivers on one directory are not
  supported: their duplicate ids would be refused, but each would still train the other's work.
* **Rows.** ``id`` (primary key; adding an id twice raises :class:`DuplicateResultError`, never a
  second row), ``config`` (dict, stored as JSON), ``status`` ("done", "stopped" when halving
  ended the run early, "failed" with the message in ``error``), ``checkpoints`` (list of
  ``{"epoch", "train_error", "train_loss", "val_error", "test_error"}``), ``final`` (dict, e.g.
  the artifact's ``{"train", "val", "test"}`` errors), ``size_bits``, ``n_parameters``, ``ops``,
  ``seconds``, ``model_path`` (str or None), ``device``, ``backend``, ``select`` ("validation" or
  "test": which split chose the reported epoch). Omitted optional fields are None (``[]``/``{}``
  for ``checkpoints``/``final``). Errors may be NaN (no validation split); config values may not.
* **Resume.** Every row counts as finished: :meth:`done_ids` includes failed and stopped rows, so
  a resumed sweep does not retry them. The stored grid spec must equal the resumed one
  (:meth:`check_spec`), otherwise the directory's results would mix two grids.
* **Keep best.** :meth:`set_model_path` (optionally clearing the superseded row's path in the same
  transaction) and :meth:`clear_model_path`. Update the table *before* deleting a superseded file,
  so a crash leaves at worst an orphan file, never a row naming a deleted file.
* :meth:`export_csv` writes a flat CSV atomically (temporary file in the target's folder, then
  ``os.replace``): one column per config key, the results, and ``train_error@E``/``val_error@E``/
  ``test_error@E`` per checkpoint epoch E.

Standard library and numpy only.
"""

from __future__ import annotations

import csv
import io
import json
import numbers
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

import numpy as np

from bnc_deploy.errors import ConfigError
from bnc_deploy.fileio import atomic_write_bytes

__all__ = ["CHECKPOINT_KEYS", "SELECT_PROTOCOLS", "STATUSES", "TABLE_FILE", "DuplicateResultError", "ResultsTable"]

#: The table's file inside a sweep directory.
TABLE_FILE = "results.sqlite"
STATUSES = ("done", "stopped", "failed")
SELECT_PROTOCOLS = ("validation", "test")
#: Keys of one checkpoint; the CSV has a column per error key and epoch.
CHECKPOINT_KEYS = ("epoch", "train_error", "train_loss", "val_error", "test_error")
_CSV_CHECKPOINT_ERRORS = ("train_error", "val_error", "test_error")
#: CSV column of a final key: the artifact metadata's "train"/"val"/"test" read as errors; other keys as they are.
_FINAL_COLUMN = {"train": "train_error", "val": "val_error", "test": "test_error"}
_FINAL_FIRST = ("train_error", "val_error", "test_error")
SCHEMA_VERSION = 1

_FIELDS = (
    "id",
    "config",
    "status",
    "error",
    "checkpoints",
    "final",
    "size_bits",
    "n_parameters",
    "ops",
    "seconds",
    "model_path",
    "device",
    "backend",
    "select",
)
# "select" is an SQL keyword; the column is named "selection".
_COLUMNS = tuple("selection" if f == "select" else f for f in _FIELDS)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS sweep (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    id TEXT PRIMARY KEY NOT NULL,
    config TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ({", ".join(repr(s) for s in STATUSES)})),
    error TEXT,
    checkpoints TEXT NOT NULL,
    final TEXT NOT NULL,
    size_bits INTEGER,
    n_parameters INTEGER,
    ops INTEGER,
    seconds REAL,
    model_path TEXT,
    device TEXT,
    backend TEXT,
    selection TEXT
);
"""


class DuplicateResultError(ConfigError):
    """A row's id is already in the table (or twice in one batch); nothing of the batch was written."""


def _jsonable(value):
    """``json`` default: numpy scalars and arrays (what trainers return) as plain Python values."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _dumps(value, *, allow_nan: bool) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=allow_nan, default=_jsonable, separators=(",", ":"))


class ResultsTable:
    """``DIR/results.sqlite``: create it (and ``DIR``) or open it; see the module docstring.

    ``spec``: the sweep's grid spec (a JSON string or a dict). Stored when the table has none;
    checked with :meth:`check_spec` when it has one. ``timeout``: seconds to wait for a lock.
    """

    def __init__(self, directory: str | os.PathLike, spec: str | dict | None = None, *, timeout: float = 30.0) -> None:
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ConfigError(f"sweep directory {self.directory} is a file, not a directory")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create sweep directory {self.directory}: {exc.strerror or exc}") from None
        self.path = self.directory / TABLE_FILE
        try:
            # isolation_level=None: this class issues BEGIN/COMMIT itself, so one add() is exactly one transaction.
            self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # FULL: a commit is on disk when add() returns (NORMAL could lose the last batches to a power cut).
            self._db.execute("PRAGMA synchronous=FULL")
            with self._transaction():
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                now = datetime.now(UTC).isoformat(timespec="seconds")
                self._db.execute("INSERT OR IGNORE INTO sweep VALUES ('created', ?)", (json.dumps(now),))
                self._db.execute("INSERT OR IGNORE INTO sweep VALUES ('schema', ?)", (json.dumps(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as exc:
            self._close_quietly()
            raise ConfigError(f"sweep results table {self.path}: cannot open ({exc})") from None
        schema = self._meta("schema")
        if schema != SCHEMA_VERSION:
            self.close()
            raise ConfigError(
                f"sweep results table {self.path} has schema version {schema}; this version of "
                f"bnc-deploy reads version {SCHEMA_VERSION}"
            )
        if spec is not None:
            if self._meta("spec") is None:
                with self._transaction():
                    self._db.execute(
                        "INSERT OR REPLACE INTO sweep VALUES ('spec', ?)", (_dumps(_spec_dict(spec), allow_nan=False),)
                    )
            else:
                try:
                    self.check_spec(spec)
                except ConfigError:
                    self.close()
                    raise

    @classmethod
    def open_existing(cls, directory: str | os.PathLike, *, timeout: float = 30.0) -> ResultsTable:
        """The table of an existing sweep directory; ConfigError when there is none."""
        path = Path(directory) / TABLE_FILE
        if not path.is_file():
            raise ConfigError(
                f"no sweep results in {directory} (expected {path}); start the sweep with this directory first"
            )
        return cls(directory, timeout=timeout)

    # -- housekeeping ------------------------------------------------------------------------------
    def close(self) -> None:
        self._db.close()

    def _close_quietly(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    class _Txn:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self):
            # IMMEDIATE: take the write lock now (waiting up to the timeout), not at the first write.
            self.db.execute("BEGIN IMMEDIATE")
            return self.db

        def __exit__(self, exc_type, exc, tb) -> None:
            self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")

    def _transaction(self) -> _Txn:
        return ResultsTable._Txn(self._db)

    def _meta(self, key: str):
        row = self._db.execute("SELECT value FROM sweep WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    @property
    def spec(self) -> dict | None:
        """The stored grid spec (None when the sweep was created without one)."""
        return self._meta("spec")

    @property
    def created(self) -> str:
        """When the table was created (ISO 8601, UTC)."""
        return self._meta("created")

    # -- spec --------------------------------------------------------------------------------------
    def check_spec(self, spec: str | dict) -> None:
        """ConfigError unless ``spec`` equals the stored spec; the message lists the differences."""
        given, stored = _spec_dict(spec), self.spec
        if stored is None:
            raise ConfigError(f"sweep results table {self.path} has no stored grid spec to compare with")
        # Through JSON, so a tuple and a list (or 3 and 3.0) compare as they will be stored.
        given = json.loads(_dumps(given, allow_nan=False))
        if given == stored:
            return
        differences = _differences(stored, given)
        shown = "; ".join(differences[:6]) + (f"; and {len(differences) - 6} more" if len(differences) > 6 else "")
        raise ConfigError(
            f"sweep directory {self.directory} holds results of another grid ({shown}); resume with "
            "the same grid, or give a new directory"
        )

    # -- rows --------------------------------------------------------------------------------------
    def done_ids(self) -> set[str]:
        """Ids of every row (done, stopped or failed): the configurations a resume skips."""
        return {row[0] for row in self._db.execute("SELECT id FROM results")}

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def add(self, rows: list[dict]) -> None:
        """Insert ``rows`` in one transaction: all of them or (on any error) none.

        ConfigError naming the row's id and field for a malformed row; DuplicateResultError for an id
        already in the table or repeated in ``rows``.
        """
        values = [_row_values(row, i) for i, row in enumerate(rows)]
        seen: set[str] = set()
        for value in values:
            if value[0] in seen:
                raise DuplicateResultError(f"result id {value[0]} appears twice in one batch; nothing was written")
            seen.add(value[0])
        if not values:
            return
        placeholders = ", ".join("?" * len(_COLUMNS))
        with self._transaction() as db:
            for value in values:
                try:
                    db.execute(f"INSERT INTO results ({', '.join(_COLUMNS)}) VALUES ({placeholders})", value)
                except sqlite3.IntegrityError:
                    # The with-block rolls the whole batch back.
                    raise DuplicateResultError(
                        f"result id {value[0]} is already in {self.path}; nothing of this "
                        f"batch of {len(values)} rows was written"
                    ) from None

    def rows(self) -> list[dict]:
        """Every row, decoded, in insertion order."""
        cursor = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM results ORDER BY rowid")
        return [_decode(row) for row in cursor]

    def set_model_path(self, id: str, path: str | os.PathLike, *, replaces: str | None = None) -> None:
        """Record ``path`` as row ``id``'s model file; with ``replaces``, clear that row's path in the
        same transaction (the keep-best policy's hand-over). ConfigError for an unknown id."""
        with self._transaction() as db:
            self._update_path(db, id, str(path))
            if replaces is not None and replaces != id:
                self._update_path(db, replaces, None)

    def clear_model_path(self, id: str) -> None:
        """Row ``id`` no longer has a model file (its file was superseded). ConfigError for an unknown id."""
        with self._transaction() as db:
            self._update_path(db, id, None)

    def _update_path(self, db: sqlite3.Connection, id: str, path: str | None) -> None:
        if db.execute("UPDATE results SET model_path = ? WHERE id = ?", (path, id)).rowcount != 1:
            raise ConfigError(f"no result with id {id!r} in {self.path}")

    # -- export ------------------------------------------------------------------------------------
    def export_csv(self, path: str | os.PathLike) -> Path:
        """Write every row as CSV, atomically; return the path.

        Columns: ``id``; the config keys (union over rows, sorted; a key that collides with a result
        column is written ``config.KEY``); ``status``, ``error``; the final errors
        (``train_error``, ``val_error``, ``test_error``, from ``final``'s ``train``/``val``/``test``
        or ``*_error`` keys, then other final keys sorted);
        ``train_error@E``, ``val_error@E``, ``test_error@E`` for each checkpoint epoch E ascending;
        ``size_bits``, ``n_parameters``, ``ops``, ``seconds``, ``model_path``, ``select``, ``device``,
        ``backend``. Missing values are empty cells.
        """
        rows = self.rows()
        config_keys = sorted({k for row in rows for k in row["config"]})
        final_keys = sorted({k for row in rows for k in row["final"]}, key=_final_order)
        final_columns = [_FINAL_COLUMN.get(k, k) for k in final_keys]
        if len(set(final_columns)) < len(final_columns):  # e.g. both "test" and "test_error": keep both apart
            final_columns = list(final_keys)
        epochs = sorted({c["epoch"] for row in rows for c in row["checkpoints"]})
        checkpoint_columns = [f"{name}@{epoch}" for epoch in epochs for name in _CSV_CHECKPOINT_ERRORS]
        tail = ["size_bits", "n_parameters", "ops", "seconds", "model_path", "select", "device", "backend"]
        result_columns = {"id", "status", "error", *final_columns, *checkpoint_columns, *tail}
        config_columns = [f"config.{k}" if k in result_columns else k for k in config_keys]
        header = ["id", *config_columns, "status", "error", *final_columns, *checkpoint_columns, *tail]
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        for row in rows:
            by_epoch = {c["epoch"]: c for c in row["checkpoints"]}
            cells = [
                row["id"],
                *(row["config"].get(k) for k in config_keys),
                row["status"],
                row["error"],
                *(row["final"].get(k) for k in final_keys),
                *(by_epoch.get(epoch, {}).get(name) for epoch in epochs for name in _CSV_CHECKPOINT_ERRORS),
                *(row[k] for k in tail),
            ]
            writer.writerow(["" if cell is None else _cell(cell) for cell in cells])
        atomic_write_bytes(path, out.getvalue().encode("utf-8"))
        return Path(path)


def _final_order(key: str) -> tuple:
    column = _FINAL_COLUMN.get(key, key)
    return (_FINAL_FIRST.index(column) if column in _FINAL_FIRST else len(_FINAL_FIRST), key)


def _cell(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # full precision, and nan as "nan"
    return str(value)


def _spec_dict(spec: str | dict) -> dict:
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"grid spec is not valid JSON ({exc})") from None
    if not isinstance(spec, dict):
        raise ConfigError(f"grid spec must be a JSON object, got {type(spec).__name__}")
    return spec


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _differences(stored, given, prefix: str = "") -> list[str]:
    """``"axes.lr: stored [0.03, 0.003], given [0.03]"`` for each differing leaf (dicts recursed)."""
    if isinstance(stored, dict) and isinstance(given, dict):
        out = []
        for key in sorted(set(stored) | set(given)):
            name = f"{prefix}.{key}" if prefix else key
            if key not in given:
                out.append(f"{name}: stored {_short(stored[key])}, not given")
            elif key not in stored:
                out.append(f"{name}: not stored, given {_short(given[key])}")
            elif stored[key] != given[key]:
                out.extend(_differences(stored[key], given[key], name))
        return out
    return [f"{prefix or 'spec'}: stored {_short(stored)}, given {_short(given)}"]


# -- row encoding ----------------------------------------------------------------------------------
def _row_values(row: dict, index: int) -> tuple:
    """The column values of one row, checked; ConfigError naming the row and the field."""
    if not isinstance(row, dict):
        raise ConfigError(f"result row #{index} must be a dict, got {type(row).__name__}")
    ident = row.get("id")
    if not isinstance(ident, str) or not ident:
        raise ConfigError(f"result row #{index}: id must be a non-empty string, got {ident!r}")
    where = f"result {ident}"
    unknown = sorted(set(row) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(unknown)}; fields are {', '.join(_FIELDS)}")
    config = row.get("config")
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: config must be a dict, got {type(config).__name__}")
    status = row.get("status")
    if status not in STATUSES:
        raise ConfigError(f"{where}: status {status!r} is not one of {', '.join(STATUSES)}")
    error = row.get("error")
    if status == "failed" and not (isinstance(error, str) and error):
        raise ConfigError(f"{where}: a failed row needs its error message")
    if error is not None and not isinstance(error, str):
        raise ConfigError(f"{where}: error must be a string or None, got {error!r}")
    checkpoints = row.get("checkpoints") or []
    if not isinstance(checkpoints, (list, tuple)):
        raise ConfigError(f"{where}: checkpoints must be a list, got {type(checkpoints).__name__}")
    epochs = set()
    for c in checkpoints:
        if not isinstance(c, dict) or set(c) - set(CHECKPOINT_KEYS) or "epoch" not in c:
            raise ConfigError(
                f"{where}: a checkpoint is a dict with epoch and some of {', '.join(CHECKPOINT_KEYS[1:])}, got {c!r}"
            )
        epoch = c["epoch"]
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral):
            raise ConfigError(f"{where}: checkpoint epoch must be an integer, got {epoch!r}")
        if int(epoch) in epochs:
            raise ConfigError(f"{where}: checkpoint epoch {epoch} appears twice")
        epochs.add(int(epoch))
        for key in CHECKPOINT_KEYS[1:]:
            _check_number(c.get(key), f"{where}: checkpoint {epoch} {key}")
    final = row.get("final") or {}
    if not isinstance(final, dict):
        raise ConfigError(f"{where}: final must be a dict, got {type(final).__name__}")
    ints = []
    for key in ("size_bits", "n_parameters", "ops"):
        value = row.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise ConfigError(f"{where}: {key} must be an integer or None, got {value!r}")
        ints.append(None if value is None else int(value))
    seconds = _check_number(row.get("seconds"), f"{where}: seconds")
    texts = []
    for key in ("model_path", "device", "backend", "select"):
        value = row.get(key)
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where}: {key} must be a string or None, got {value!r}")
        texts.append(value)
    if texts[3] is not None and texts[3] not in SELECT_PROTOCOLS:
        raise ConfigError(f"{where}: select {texts[3]!r} is not one of {', '.join(SELECT_PROTOCOLS)}")
    try:
        config_json = _dumps(config, allow_nan=False)
        checkpoints_json = _dumps([{k: c[k] for k in CHECKPOINT_KEYS if k in c} for c in checkpoints], allow_nan=True)
        final_json = _dumps(final, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: not JSON-serializable ({exc})") from None
    return (
        ident,
        config_json,
        status,
        error,
        checkpoints_json,
        final_json,
        *ints,
        None if seconds is None else float(seconds),
        *texts,
    )


def _check_number(value, where: str):
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        raise ConfigError(f"{where} must be a number or None, got {value!r}")
    return value


def _decode(values: tuple) -> dict:
    row = dict(zip(_FIELDS, values))
    for key in ("config", "checkpoints", "final"):
        row[key] = json.loads(row[key])
    return row
