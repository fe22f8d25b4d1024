"""The public Python API: load a model file, export it, open an export in a runtime, profile files.

Every function here is the library under a command-line tool, with typed results::

    import bnc_deploy

    model = bnc_deploy.load("nb3.bnc")                      # BNCArtifact / DNNArtifact
    report = bnc_deploy.export(model, "nb3.onnx")           # ExportReport (bnc-export --json)
    rt = bnc_deploy.load_runtime("nb3.onnx")                # RuntimeAdapter
    rows = bnc_deploy.profile(["nb3.bnc", "nb3.onnx"])      # list[Profile] (bnc-profile)

* :func:`load` reads model files (``.bnc``) only. An exported file (``.onnx``, ``.ort``,
  ``.tflite``, ``.h``) is a program for a runtime, not a model file: open it with
  :func:`load_runtime`; :func:`load` refuses it, saying so.
* :func:`export` takes a model file object, the path of a ``.bnc`` file, or a fitted estimator of
  :mod:`bnc_deploy.sklearn` (or a fitted pipeline of them, converted by
  :func:`bnc_deploy.sklearn.to_artifact`). The format comes from the output's extension through the
  exporter registry (:mod:`bnc_deploy.exporters.base`), the options are the exporter's declared
  ones, and the file reaches disk only through the one verifier, :func:`bnc_deploy.verify.export_file`,
  as with ``bnc-export``.
* :func:`profile` runs the profiling library of ``bnc-profile`` (:mod:`bnc_deploy.profiling`) and
  returns one :class:`~bnc_deploy.profiling.result.Profile` per (file, runtime, threads); its
  ``to_dict()`` is the row ``bnc-profile --json`` prints for the same files and settings.

Errors are :mod:`bnc_deploy.errors` types, one line naming the problem. Nothing here imports
torch: a fitted estimator predicts and exports without it.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from bnc_deploy.artifacts import ARTIFACT_KINDS, load_artifact
from bnc_deploy.errors import ConfigError, ExportError, MissingExtraError
from bnc_deploy.exporters.base import ExporterSpec, exporter_for, exporters, formats, unavailable
from bnc_deploy.fileio import check_output_path
from bnc_deploy.formats.integrity import check_key, read_key
from bnc_deploy.profiling.result import Profile
from bnc_deploy.runtimes.base import RUNTIMES, RuntimeAdapter, default_runtime
from bnc_deploy.verify import CHECK_SET_ROWS, ExportReport, ExportResult, export_file

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from bnc_deploy.artifacts.bnc import BNCArtifact
    from bnc_deploy.artifacts.dnn import DNNArtifact
    from bnc_deploy.profiling.options import ServedModel, TestSplit

__all__ = ["ExportReport", "ExportResult", "Profile", "export", "load", "load_runtime", "profile"]

#: A model file in memory.
Artifact: TypeAlias = "BNCArtifact | DNNArtifact"
#: A file name.
PathLike: TypeAlias = "str | os.PathLike[str]"
#: A key: its bytes, or the file holding them (``bnc-export --sign-key FILE``).
Key: TypeAlias = "bytes | str | os.PathLike[str]"

#: The suffix of model files (what :func:`load` reads).
MODEL_SUFFIX = ".bnc"


def load(path: PathLike) -> Artifact:
    """Read a model file written by ``bnc-train``, :func:`bnc_deploy.artifacts.save_artifact` or
    :func:`bnc_deploy.sklearn.to_artifact`.

    Parameters
    ----------
    path
        A ``.bnc`` model file.

    Returns
    -------
    BNCArtifact or DNNArtifact
        The model, validated (its kind from the file's header).

    Raises
    ------
    ConfigError
        ``path`` is an exported file (``.onnx``, ``.ort``, ``.tflite``, ``.h``): those open in a
        runtime with :func:`load_runtime`.
    ArtifactError
        The file is missing, corrupt, modified, of a newer version or inconsistent.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix != MODEL_SUFFIX and default_runtime(p) is not None:
        raise ConfigError(
            f"{p} is an exported {suffix} file, not a model file: open it with "
            f"bnc_deploy.load_runtime({str(p)!r}) (load reads {MODEL_SUFFIX} model files)"
        )
    artifact: Artifact = load_artifact(p)
    return artifact


def load_runtime(path: PathLike, runtime: str | None = None, **options: Any) -> RuntimeAdapter:
    """Open a model file or an exported file in a runtime (the file's bytes are read once).

    Parameters
    ----------
    path
        A ``.bnc`` model (runtime ``numpy``, the reference) or an export: ``.onnx``/``.ort``
        (``onnxruntime``), ``.tflite`` (``litert``; ``tflm`` runs micro-profile files), ``.h``
        (``native``: compiled with the host C compiler).
    runtime
        A registered runtime's name (:data:`bnc_deploy.runtimes.base.RUNTIMES`); None: the
        default for the extension (:func:`bnc_deploy.runtimes.base.default_runtime`).
    **options
        The adapter's options: ``threads`` (None: the runtime's default), ``key`` (bytes: the key
        of a file signed with ``bnc-export --sign-key``), ``verify_integrity`` (False: skip the
        check of the file's digest), ...

    Returns
    -------
    RuntimeAdapter
        ``predict(x)`` (labels), ``log_joint(x)`` (scores: log-joints, or a DNN's logits),
        ``run(x)`` (both), ``metadata`` (the file's).

    Raises
    ------
    ConfigError
        Unknown runtime, or an extension that names none.
    MissingExtraError
        The runtime's framework is not installed (the message names the extra).
    RuntimeLoadError
        The file is missing, corrupt or not a bnc-deploy file.
    IntegrityError
        The file was modified after export (or signed with another key).
    """
    from bnc_deploy.runtimes.base import load_runtime as open_runtime

    return open_runtime(path, runtime, **options)


def export(
    model: Any,
    path: PathLike,
    format: str | None = None,
    *,
    key: Key | None = None,
    rows: ArrayLike | None = None,
    labels: ArrayLike | None = None,
    min_agreement: float | None = None,
    **options: Any,
) -> ExportReport:
    """Export a model to ``path``, verify the file against the model, publish it only if it passes.

    Parameters
    ----------
    model
        A model file in memory (BNCArtifact, DNNArtifact), the path of a ``.bnc`` model file, or a
        fitted :mod:`bnc_deploy.sklearn` estimator or pipeline (``[FayyadIraniDiscretizer,
        BNClassifier]`` embeds the discretizer, so ``raw_inputs=True`` exports take raw values).
    path
        The file to write.
    format
        A registered format (``"onnx"``, ``"ort"``, ``"tflite"``, ``"c"``); None: the one whose
        exporter writes ``path``'s extension (``.onnx``, ``.ort``, ``.tflite``, ``.h``).
    key
        Sign the file with HMAC-SHA256 under this key (bytes, or a key file; at least 32 bytes);
        loading it then needs the key. None: sealed with its SHA-256.
    rows, labels
        Rows (integer codes, shape (n, D)) to verify on and their true labels; default: the check
        set stored in the model. Seeded random rows are always added.
    min_agreement
        Refuse a file that is not exact by design when its labels agree with the model's on
        fewer than this fraction of ``rows``.
    **options
        The exporter's declared options (``bnc-export --help`` lists them as flags):
        ``lowering``, ``raw_inputs``, ``opset``, ``pack_bits``, ``onehot``, ``profile``, ...

    Returns
    -------
    ExportReport
        The model's facts, the file and its verification (``result``, an :class:`ExportResult`);
        ``to_dict()`` is the object ``bnc-export --json`` prints for the same export.

    Raises
    ------
    ExportError
        Unknown format or extension (the message lists the registered formats), an option the
        exporter does not declare or a value it refuses, or a file its runtime cannot load.
    VerificationError
        An ExportError: a file that promises exactness is not exact, or agreement is below
        ``min_agreement``; nothing was written (``report`` holds the comparison).
    OutputError
        ``path`` cannot be written.
    MissingExtraError
        The format's exporter or runtime, or the conversion of an estimator, needs an extra.
    """
    source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    artifact = _as_artifact(model, what="export")
    spec = _exporter(artifact.kind, path, format)
    _refuse_internal(spec, options)
    output = check_output_path(path, inputs=(source,))
    if output.suffix.lower() != spec.extension:
        warnings.warn(
            f"{output} does not end in {spec.extension}, the extension of {spec.format} files; "
            "runtimes pick their format by it",
            UserWarning,
            stacklevel=2,
        )
    result = export_file(
        artifact, output, spec.format, rows=rows, labels=labels, min_agreement=min_agreement, key=_key(key), **options
    )
    if rows is not None:
        data = f"{result.n_rows} rows given"
    else:
        data = CHECK_SET_ROWS if artifact.check_x is not None else "none (the model stores no check set; pass rows=)"
    model_name = source if source is not None else f"<{type(model).__name__}>"
    return ExportReport.of(artifact, result, model=model_name, output=os.fspath(path), data=data)


def profile(
    models: Any,
    *,
    runtime: str | Sequence[str] | None = None,
    data: str | os.PathLike[str] | TestSplit | Any | None = None,
    fold: int | None = None,
    latency: bool = True,
    runs: int = 200,
    warmup: int = 20,
    repeats: int = 3,
    throughput_repeats: int = 5,
    latency_mode: str = "session",
    nodes: bool = False,
    key: Key | None = None,
    verify_integrity: bool = True,
    url: str | None = None,
    served_name: str | None = None,
) -> list[Profile]:
    """Profile model files and exports: costs, graph count, test error and latency, per runtime.

    The same run as ``bnc-profile FILE... --json`` (:mod:`bnc_deploy.profiling`): each file runs
    in its default runtime when that runtime is selected, with each of its thread settings, and
    the Pareto flags are taken over the rows of this call.

    Parameters
    ----------
    models
        A file (``.bnc``, ``.onnx``, ``.ort``, ``.tflite``, ``.h``), a model in memory (an
        artifact or a fitted :mod:`bnc_deploy.sklearn` estimator or pipeline), or a sequence of
        them. A model in memory is profiled as a ``.bnc`` file; its rows' ``file`` is
        ``<TypeName #i>``, i its position among ``models``. JSON result files are not taken.
    runtime
        The runtimes to use (a name, comma-separated names or a sequence); None: numpy,
        onnxruntime, litert and native (``bnc-profile``'s default).
    data
        The test split that gives the test error and the timed rows: a dataset name or file
        (as ``bnc-profile --data``), a loaded dataset (``x_test``, ``y_test``, ``name``, ``fold``)
        or a :class:`~bnc_deploy.profiling.options.TestSplit`. None: seeded random valid codes
        are timed and the test error is the one stored in a ``.bnc`` model.
    fold
        The 1-based fold of a dataset named by ``data`` (default 1).
    latency, runs, warmup, repeats, throughput_repeats, latency_mode
        The timing protocol (``bnc-profile``'s ``--no-latency``, ``--runs``, ``--warmup``,
        ``--repeats``, ``--throughput-repeats``, ``--latency-mode``).
    nodes
        Also give each export's per-node counts (``graph_nodes``).
    key, verify_integrity
        The key of signed exports (bytes or a key file), and whether to check exports' digests.
    url, served_name
        With runtime ``http``: the Open Inference Protocol server serving the files, and the
        served model's name (default: each file's stem).

    Returns
    -------
    list of Profile
        One per (file, runtime, threads), in order (a file that is not run: one row, with a note).

    Raises
    ------
    ConfigError
        An unknown runtime, a JSON result file, ``url`` without runtime ``http`` (or the reverse).
    DatasetError, InputError
        ``data`` cannot be loaded or does not fit a model.
    """
    from bnc_deploy.profiling.latency import environment
    from bnc_deploy.profiling.options import LoadOptions, TimingSettings
    from bnc_deploy.profiling.runner import profile_files

    items = [models] if isinstance(models, (str, os.PathLike)) or not isinstance(models, Sequence) else list(models)
    names = _runtime_names(runtime)
    served = _served(names, url, served_name, n_items=len(items))
    split = _test_split(data, fold)
    timing = TimingSettings(latency, runs, warmup, repeats, throughput_repeats, latency_mode)
    load = LoadOptions(verify_integrity=verify_integrity, key=_key(key))
    with tempfile.TemporaryDirectory(prefix="bnc-profile-") as folder:
        files, labels = _profile_files(items, Path(folder))
        run = profile_files(
            files, names, split, env=environment(), timing=timing, nodes=nodes, load_options=load, http_options=served
        )
    return [Profile.from_row(dict(row, file=labels.get(row["file"], row["file"]))) for row in run.rows]


# -- helpers --------------------------------------------------------------------------------------
def _as_artifact(model: Any, *, what: str) -> Artifact:
    """``model`` as a model file object: an artifact as it is, a ``.bnc`` path loaded, a fitted
    estimator or pipeline converted (:func:`bnc_deploy.sklearn.to_artifact`); TypeError otherwise."""
    if isinstance(model, tuple(ARTIFACT_KINDS.values())):
        return cast("Artifact", model)
    if isinstance(model, (str, os.PathLike)):
        return load(model)
    if hasattr(model, "get_params"):  # a scikit-learn estimator or pipeline
        try:
            from bnc_deploy.sklearn import to_artifact
        except ImportError as exc:
            if isinstance(exc, MissingExtraError) or (exc.name or "").startswith("bnc_deploy"):
                raise
            raise MissingExtraError(f"{what} of a scikit-learn estimator", "sklearn", exc) from exc
        converted: Artifact = to_artifact(model)
        return converted
    raise TypeError(
        f"{what} takes a model (BNCArtifact, DNNArtifact), the path of a {MODEL_SUFFIX} model file, "
        f"or a fitted bnc_deploy.sklearn estimator or pipeline; got {type(model).__name__}"
    )


def _exporter(kind: str, path: PathLike, format: str | None) -> ExporterSpec:
    """The exporter of ``kind`` models to ``format``, or to the format of ``path``'s extension."""
    registry = exporters()
    if format is not None:
        if format not in formats():
            raise ExportError(f"unknown format {format!r}; registered formats: {_format_list(registry, kind)}")
        return exporter_for(kind, format)
    suffix = Path(path).suffix.lower()
    matches = sorted(spec.format for (k, _), spec in registry.items() if k == kind and spec.extension == suffix)
    if len(matches) == 1:
        return registry[(kind, matches[0])]
    if suffix == MODEL_SUFFIX:
        raise ExportError(
            f"{path}: a {MODEL_SUFFIX} file is a model file, not an export; write one with "
            f"bnc_deploy.artifacts.save_artifact(model, path). Export formats: {_format_list(registry, kind)}"
        )
    if matches:
        raise ExportError(f"{path}: {suffix} files are written by formats {', '.join(matches)}; pass format=")
    missing = "; ".join(unavailable().values())
    raise ExportError(
        f"{path}: cannot tell the export format from the extension {suffix or '(none)'!r}; "
        f"registered formats: {_format_list(registry, kind)}" + (f" (not available here: {missing})" if missing else "")
    )


def _format_list(registry: dict[tuple[str, str], ExporterSpec], kind: str) -> str:
    """``c (.h), onnx (.onnx), ...``: the formats with an exporter of ``kind`` models, or all of them."""
    specs = [spec for (k, _), spec in registry.items() if k == kind] or list(registry.values())
    named = sorted({(spec.format, spec.extension) for spec in specs})
    return ", ".join(f"{fmt} ({ext})" for fmt, ext in named)


def _refuse_internal(spec: ExporterSpec, options: dict[str, Any]) -> None:
    """ExportError for an option the verifier sets itself (e.g. ``lowering_timings``)."""
    internal = [option.name for option in spec.options if option.internal and option.name in options]
    if internal:
        raise ExportError(f"option {internal[0]!r} is set by the verifier, not by callers")


def _key(key: Key | None) -> bytes | None:
    """The key's bytes: ``key`` itself (checked), or read from the file it names."""
    if key is None:
        return None
    if isinstance(key, bytes):
        checked: bytes = check_key(key)
        return checked
    return read_key(key)


def _runtime_names(runtime: str | Sequence[str] | None) -> list[str]:
    """The selected runtimes (ConfigError naming an unknown one)."""
    from bnc_deploy.profiling.runner import DEFAULT_RUNTIMES

    if runtime is None:
        return list(DEFAULT_RUNTIMES)
    given = runtime.split(",") if isinstance(runtime, str) else list(runtime)
    names = [name.strip() for name in given if name.strip()]
    unknown = [name for name in names if name not in RUNTIMES]
    if unknown or not names:
        raise ConfigError(
            f"runtime: unknown runtime {', '.join(map(repr, unknown)) or repr(runtime)}; "
            f"choose from {', '.join(sorted(RUNTIMES))}"
        )
    return names


def _served(names: list[str], url: str | None, served_name: str | None, *, n_items: int) -> ServedModel | None:
    """The ServedModel of runtime ``http``, None without it; ConfigError when they do not come together."""
    from bnc_deploy.profiling.options import ServedModel

    if "http" not in names:
        if url or served_name:
            raise ConfigError("url/served_name apply to runtime 'http' only")
        return None
    if not url:
        raise ConfigError("runtime 'http' needs url (the server, e.g. http://127.0.0.1:8000)")
    if served_name and n_items > 1:
        raise ConfigError("served_name names one served model: profile one file with it")
    return ServedModel(url, served_name)


def _test_split(data: Any, fold: int | None) -> TestSplit | None:
    """``data`` as a TestSplit: a dataset spec loaded, a loaded dataset's test split, or as given."""
    from bnc_deploy.profiling.options import TestSplit

    if fold is not None and not isinstance(data, (str, os.PathLike)):
        raise ConfigError("fold applies to a dataset named by data (a name or a file)")
    if data is None or isinstance(data, TestSplit):
        return data
    if isinstance(data, (str, os.PathLike)):
        from bnc_deploy.datasets import load_dataset

        return TestSplit.from_dataset(load_dataset(os.fspath(data), fold=1 if fold is None else fold))
    if not all(hasattr(data, name) for name in ("x_test", "y_test", "name", "fold")):
        raise TypeError(
            f"data takes a dataset name or file, a loaded dataset or a TestSplit; got {type(data).__name__}"
        )
    return TestSplit.from_dataset(data)


def _profile_files(items: list[Any], folder: Path) -> tuple[list[str], dict[str, str]]:
    """The file of each item (a model in memory saved in ``folder``) and the ``file`` label of each saved one."""
    from bnc_deploy.artifacts import save_artifact
    from bnc_deploy.profiling.files import check_files, is_result_file

    files: list[str] = []
    labels: dict[str, str] = {}
    for i, item in enumerate(items):
        if isinstance(item, (str, os.PathLike)):
            name = os.fspath(item)
            if is_result_file(name):
                raise ConfigError(f"{name}: profile measures model files; read JSON result files with json.load")
            check_files([name])
            files.append(name)
            continue
        saved = folder / f"model{i}{MODEL_SUFFIX}"
        save_artifact(_as_artifact(item, what="profile"), saved)
        files.append(str(saved))
        labels[str(saved)] = f"<{type(item).__name__} #{i}>"
    return files, labels
