"""The typed ``bnc-profile`` row: :class:`Profile`, one (file, runtime, threads) measurement.

The profiling library builds its rows as dicts (:func:`bnc_deploy.profiling.rows.base_row`,
:func:`bnc_deploy.profiling.measure.measure_runtime`), and ``bnc-profile --json`` prints them as
they are. The public API (:func:`bnc_deploy.api.profile`) returns them as :class:`Profile`
objects instead: :meth:`Profile.from_row` types a row of a model file, and :meth:`Profile.to_dict`
gives back exactly that row, the keys of :data:`~bnc_deploy.profiling.rows.JSON_KEYS` in their
order, then ``graph_nodes`` when the per-node table was asked for.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Profile"]

#: Fields held as tuples (immutable) that the row holds as lists.
_LIST_FIELDS = frozenset({"graph_unknown_ops", "notes", "graph_nodes"})
#: Fields that are absent from the row while they are None.
_ABSENT_WHEN_NONE = frozenset({"graph_nodes"})


@dataclass(frozen=True, kw_only=True)
class Profile:
    """One profiled (file, runtime, threads): what the file is, what it costs, how it ran.

    The fields are the keys of a ``bnc-profile --json`` row (:data:`bnc_deploy.profiling.rows.JSON_KEYS`,
    a contract: only ever added to), with the same values; None where a value is unknown or does
    not apply (no test split: no ``test_error`` of an export; no timing: no ``latency_*``; a
    ``.bnc`` model or a C file: no ``graph_*``; a host run: no ``target_*``).

    Notes
    -----
    ``notes`` and ``graph_unknown_ops`` are tuples here and lists in :meth:`to_dict`;
    ``graph_categories``, ``environment`` and ``graph_nodes`` entries are dicts, copied by
    :meth:`to_dict`.
    """

    #: The model file (a path as given; ``<TypeName #i>`` for the i-th argument given in memory).
    file: str
    #: The file's suffix without its dot (``"bnc"``, ``"onnx"``, ``"ort"``, ``"tflite"``, ``"h"``).
    format: str
    #: ``"bnc"`` or ``"dnn"``.
    model_kind: str | None = None
    #: The model's structure (``"nb"``, ``"tan"``, ..., ``"fc"``, ``"cnn"``).
    structure: str | None = None
    #: The export's lowering (None for a ``.bnc`` model).
    lowering: str | None = None
    #: Bits per parameter (32: float).
    bits: int | None = None
    #: Whether the parameters are quantized codes.
    quantized: bool | None = None
    #: The runtime that ran the file (None: not run, see ``notes``).
    runtime: str | None = None
    #: Its thread setting (None: the runtime's default, or the NumPy reference).
    threads: int | None = None
    #: The test split's dataset (or the one stored in a ``.bnc`` model).
    dataset: str | None = None
    #: Its 1-based fold.
    fold: int | None = None
    #: Rows of the test split.
    n_test_rows: int | None = None
    #: Test error (fraction of rows whose label is wrong).
    test_error: float | None = None
    #: Where the test error comes from (a runtime on the test split, or the model's metadata).
    test_error_source: str | None = None
    #: Stored parameters the size counts.
    n_parameters: int | None = None
    #: Parameter memory in bits (the paper's size).
    size_bits: int | None = None
    #: Operations per row (the paper's count).
    n_ops: int | None = None
    #: Comparisons of the final argmax.
    argmax_comparisons: int | None = None
    #: Index arithmetic of the table look-ups.
    addressing_ops: int | None = None
    #: Operations counted in the exported graph (comparable with ``n_ops``).
    graph_ops: int | None = None
    #: Parameter bits counted in the graph.
    graph_param_bits: int | None = None
    #: Bits the graph stores its parameters in.
    graph_storage_bits: int | None = None
    #: Multiply-accumulates counted in the graph.
    graph_macs: int | None = None
    #: Table look-ups counted in the graph.
    graph_lookups: int | None = None
    #: Counted operations per category (:data:`bnc_deploy.profiling.rows.GRAPH_CATEGORIES`, ``folded``).
    graph_categories: dict[str, Any] | None = None
    #: Whether every op of the graph has a counting rule.
    graph_complete: bool | None = None
    #: Ops without a counting rule.
    graph_unknown_ops: tuple[str, ...] | None = None
    #: Whether the counted size and operations equal the analytic ones.
    graph_matches_analytic: bool | None = None
    #: ``"session"`` (the bare runtime call) or ``"adapter"`` (with input validation).
    latency_mode: str | None = None
    #: The rows timed.
    latency_input: str | None = None
    #: Median batch-1 latency, microseconds.
    latency_us_p50_batch1: float | None = None
    #: 99th percentile batch-1 latency, microseconds.
    latency_us_p99_batch1: float | None = None
    #: Mean batch-1 latency, microseconds.
    latency_us_mean_batch1: float | None = None
    #: Timed batch-1 calls.
    latency_runs: int | None = None
    #: Rows per second at the throughput batch.
    throughput_rows_per_s: int | None = None
    #: The batch the throughput was measured at.
    throughput_batch: str | None = None
    #: Size of the file in bytes.
    file_bytes: int | None = None
    #: The CPU model.
    cpu: str | None = None
    #: Where the numbers were measured (:func:`bnc_deploy.profiling.latency.environment`).
    environment: dict[str, Any] | None = None
    #: Whether the row is on the Pareto front of its dataset (None: an objective is unknown).
    pareto: bool | None = None
    #: What a reader should know (not run, graph count incomplete, ...).
    notes: tuple[str, ...] = ()
    #: The emulated target (``bnc-profile --target``; None on host rows), and its comparison with this host.
    target: str | None = None
    target_method: str | None = None
    target_label_agreement: float | None = None
    target_exact: bool | None = None
    target_max_abs_score_diff: float | None = None
    target_reference_exact: bool | None = None
    target_check_set: bool | None = None
    target_ok: bool | None = None
    #: The per-node counts of the graph (``nodes=True``); absent from :meth:`to_dict` while None.
    graph_nodes: tuple[dict[str, Any], ...] | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Profile:
        """The profile of one row built by the profiling library.

        Raises
        ------
        KeyError
            When the row has a key that is not a field (a row of a JSON result file, say).
        """
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = [key for key in row if key not in names]
        if unknown:
            raise KeyError(f"profile row keys that are not Profile fields: {', '.join(unknown)}")
        values: dict[str, Any] = {
            key: tuple(value) if key in _LIST_FIELDS and isinstance(value, list) else value
            for key, value in row.items()
        }
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The ``bnc-profile --json`` row: every field in order (``graph_nodes`` only when set),
        tuples as lists, nested values copied."""
        row: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None and field.name in _ABSENT_WHEN_NONE:
                continue
            if field.name in _LIST_FIELDS and isinstance(value, tuple):
                value = list(value)
            row[field.name] = copy.deepcopy(value) if isinstance(value, (dict, list)) else value
        return row
