"""Deploy targets: where a model goes, what it is exported as, and how its costs are measured there.

A :class:`Target` declares

* its **exports** (:class:`Export`: format, exporter options, model kinds): every file reaches
  disk through the one verifier, :func:`bnc_deploy.verify.export_file`, so parity is the
  verifier's (the file run in its format's runtime against the NumPy reference); a target may
  add runtimes to check parity in (``Export.runtimes``, e.g. TFLite Micro) and its own check
  (Cortex-M: the emulated board);
* the budget **axes** it can measure (:data:`bnc_deploy.targets.budget.AXES`), with how each is
  measured (``methods``) and why the others are not (``not_measurable``). A budget on an axis the
  target cannot measure is refused (:meth:`Target.check_budget`), so nothing is reported as fitting
  on a cost nobody measured;
* :meth:`Target.measure`: export every file of the target into a folder and measure it. A
  target with several files (``web``: TFLite and ONNX) reports each axis as the **largest** over
  its files: every file it ships fits, or the model does not;
* :meth:`Target.estimate`: lower bounds from the analytic costs (``costs.py``), computable from a
  configuration before training (bits, ops exactly; flash/file bytes at least the table bytes),
  so configurations that cannot fit are pruned (:meth:`Target.cannot_fit`).

Targets register by name (:func:`register_target`, the registries' one rule:
:func:`bnc_deploy.registry.claim`). :func:`targets` imports every module ``target_*.py`` of this
package once (each registers its targets at its bottom); the other modules of ``targets/``
(checks with their own command lines) are imported only by the targets that use them, lazily.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import pkgutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnc_deploy.costs import CostReport, analytic_costs
from bnc_deploy.errors import ConfigError
from bnc_deploy.registry import claim
from bnc_deploy.targets.budget import AXES, Budget, Measured

#: Exported format -> file extension (the exporters' registered extensions).
EXTENSIONS = {"onnx": ".onnx", "ort": ".ort", "tflite": ".tflite", "c": ".h"}
#: Axes every target measures: from the model's analytic costs (``costs.py``), whatever the file.
ANALYTIC_AXES = ("ops", "bits")
ANALYTIC_METHODS = {
    "ops": "analytic operations per row of the model (costs.py: BN D x C additions; DNN MACs + BN + biases)",
    "bits": "the model's size in bits, B x |theta| (costs.py)",
}
FILE_BYTES_METHOD = "size of each exported file on disk (the largest, when the target ships several)"


@dataclass(frozen=True)
class Export:
    """One file a target ships: ``format`` with exporter ``options`` (name/value pairs), for
    artifacts of ``kinds``; ``runtimes``: runtimes it is verified in besides its format's own."""

    format: str
    options: tuple[tuple[str, Any], ...] = ()
    kinds: tuple[str, ...] = ("bnc", "dnn")
    runtimes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.options, Mapping):
            object.__setattr__(self, "options", tuple(self.options.items()))

    @property
    def extension(self) -> str:
        return EXTENSIONS.get(self.format, f".{self.format}")

    def option_dict(self) -> dict[str, Any]:
        return dict(self.options)


@dataclass(frozen=True)
class ExportedFile:
    """One exported file: where, its format and size, the verifier's report (``result``:
    :class:`bnc_deploy.verify.ExportResult`) and the extra runtimes' ``Verification`` reports."""

    path: Path
    format: str
    file_bytes: int
    result: Any
    extra: tuple[Any, ...] = ()

    @property
    def ok(self) -> bool:
        """The verifier published it and every extra runtime agreed (exactly, where promised)."""
        return all(v.exact or not v.exact_expected for v in self.extra)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": self.format,
            "file_bytes": self.file_bytes,
            "runtime": self.result.runtime,
            "exact": self.result.exact,
            "n_verified": self.result.n_verified,
            "extra_runtimes": [
                {"runtime": v.runtime, "exact": v.exact, "label_mismatches_all": v.label_mismatches_all}
                for v in self.extra
            ],
        }


@dataclass(frozen=True)
class TargetMeasurement:
    """What :meth:`Target.measure` found: the files, the costs (``measured``; None where an axis was
    not asked for or could not be measured), how each axis was measured (``methods``), raw
    figures (``details``) and ``problems`` (target checks that failed: the model does not deploy)."""

    target: str
    files: tuple[ExportedFile, ...]
    measured: Measured
    methods: Mapping[str, str] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        """The first (main) exported file."""
        return self.files[0].path

    @property
    def parity(self) -> tuple[Any, ...]:
        """The verifier's report of each file (``ExportResult``)."""
        return tuple(f.result for f in self.files)

    @property
    def ok(self) -> bool:
        """Every file verified, every extra runtime agreed, no target check failed."""
        return not self.problems and all(f.ok for f in self.files)

    def fits(self, budget: Budget) -> bool:
        """Deployable (:attr:`ok`) and within ``budget`` on every limited axis, all measured."""
        return self.ok and budget.fits(self.measured)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "files": [f.to_dict() for f in self.files],
            "measured": self.measured.to_dict(),
            "methods": dict(self.methods),
            "details": dict(self.details),
            "problems": list(self.problems),
            "ok": self.ok,
        }


@dataclass(frozen=True)
class Target:
    """A deploy target (see the module docstring). Subclasses measure their own axes in
    :meth:`measure_files` and bound them in :meth:`estimate_bounds`."""

    name: str
    description: str
    exports: tuple[Export, ...]
    #: Axes measured besides :data:`ANALYTIC_AXES` and ``file_bytes``, with how.
    methods: Mapping[str, str] = field(default_factory=dict)
    #: Axes not measurable here -> why (for the refusal of a budget on them).
    not_measurable: Mapping[str, str] = field(default_factory=dict)
    #: How parity is checked, in words.
    parity: str = "the verifier: the file run in its format's runtime against the NumPy reference"

    @property
    def axes(self) -> tuple[str, ...]:
        """Budget axes this target measures, in :data:`AXES` order."""
        own = set(ANALYTIC_AXES) | {"file_bytes"} | set(self.methods)
        return tuple(a for a in AXES if a in own)

    def all_methods(self) -> dict[str, str]:
        """Axis -> how it is measured, for every measured axis."""
        return {**ANALYTIC_METHODS, "file_bytes": FILE_BYTES_METHOD, **self.methods}

    def kinds(self) -> tuple[str, ...]:
        """Model kinds with at least one export."""
        return tuple(dict.fromkeys(k for e in self.exports for k in e.kinds))

    def exports_for(self, kind: str) -> tuple[Export, ...]:
        """The exports of ``kind`` models; ConfigError naming the kinds the target takes if none."""
        found = tuple(e for e in self.exports if kind in e.kinds)
        if not found:
            raise ConfigError(f"target {self.name} takes {', '.join(self.kinds())} models, not {kind} models")
        return found

    def with_options(self, format: str, **options: Any) -> Target:
        """This target with ``options`` set on its ``format`` exports (e.g. ``pack_bits=True``)."""
        if not any(e.format == format for e in self.exports):
            raise ConfigError(f"target {self.name} exports no {format} file")
        exports = tuple(
            dataclasses.replace(e, options=tuple({**e.option_dict(), **options}.items())) if e.format == format else e
            for e in self.exports
        )
        return dataclasses.replace(self, exports=exports)

    def check_budget(self, budget: Budget | Iterable[str]) -> None:
        """ConfigError naming this target, the axes it cannot measure (and why) and the axes it
        measures, when ``budget`` (a :class:`Budget` or axis names) limits an axis it cannot measure."""
        asked = budget.axes() if isinstance(budget, Budget) else tuple(budget)
        unknown = [a for a in asked if a not in AXES]
        if unknown:
            raise ConfigError(f"unknown budget axis {unknown[0]!r}; axes: {', '.join(AXES)}")
        missing = [a for a in asked if a not in self.axes]
        if missing:
            why = "; ".join(f"{a}: {self.not_measurable[a]}" for a in missing if a in self.not_measurable)
            flags = ", ".join("--max-" + a.replace("_", "-") for a in missing)
            raise ConfigError(
                f"target {self.name} cannot measure {flags}" + (f" ({why})" if why else "") + "; it measures "
                f"{', '.join('--max-' + a.replace('_', '-') for a in self.axes)}"
            )

    def measure(
        self, artifact: Any, workdir: str | os.PathLike[str], *, axes: Iterable[str] | None = None, key=None
    ) -> TargetMeasurement:
        """Export ``artifact`` for this target into ``workdir`` (through the one verifier) and
        measure ``axes`` (default: every axis the target measures; others stay None).

        Raises ConfigError for an axis the target cannot measure or a model kind it does not
        take, and what :func:`~bnc_deploy.verify.export_file` raises (a file that fails its
        parity is never published, so never measured). Target checks that fail (the emulated
        board disagrees, a tool cannot measure) are in ``problems``."""
        from bnc_deploy.verify import export_file, verify_file

        wanted = self.axes if axes is None else tuple(axes)
        self.check_budget(wanted)
        folder = Path(workdir)
        folder.mkdir(parents=True, exist_ok=True)
        files = []
        for export in self.exports_for(artifact.kind):
            path = folder / f"{self.name}{export.extension}"
            result = export_file(artifact, path, export.format, key=key, **export.option_dict())
            extra = tuple(verify_file(artifact, path, rt, key=key) for rt in export.runtimes)
            files.append(ExportedFile(Path(result.path), export.format, path.stat().st_size, result, extra))
        values: dict[str, Any] = {}
        costs = analytic_costs(artifact)
        if "ops" in wanted:
            values["ops"] = int(costs.n_ops)
        if "bits" in wanted:
            values["bits"] = int(costs.size_bits)
        if "file_bytes" in wanted:
            values["file_bytes"] = max(f.file_bytes for f in files)
        own = tuple(a for a in wanted if a in self.methods)
        details: dict[str, Any] = {}
        problems: list[str] = [
            f"{f.path.name} disagrees with the reference in {v.runtime}"
            for f in files
            for v in f.extra
            if v.exact_expected and not v.exact
        ]
        if own:
            got, details, found = self.measure_files(artifact, tuple(files), folder, own)
            values.update({a: got.get(a) for a in own})
            problems += found
        checked, found = self.check_files(artifact, tuple(files), folder)
        details = {**details, **checked}
        problems += found
        methods = {a: m for a, m in self.all_methods().items() if a in wanted}
        return TargetMeasurement(self.name, tuple(files), Measured(**values), methods, details, tuple(problems))

    def measure_files(
        self, artifact: Any, files: tuple[ExportedFile, ...], workdir: Path, axes: tuple[str, ...]
    ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
        """The target's own axes (``axes`` are among :attr:`methods`) of the exported ``files``:
        ``({axis: value or None}, details, problems)``. The base target has none."""
        return {}, {}, []

    def check_files(
        self, artifact: Any, files: tuple[ExportedFile, ...], workdir: Path
    ) -> tuple[dict[str, Any], list[str]]:
        """The target's own checks of the exported files, whatever the axes: ``(details, problems)``;
        a problem means the model does not deploy there. The base target has none."""
        return {}, []

    def estimate(self, facts: Any) -> Measured:
        """Lower bounds of the costs, before any export: ``facts`` is an artifact or a
        :class:`~bnc_deploy.costs.CostReport` (from a configuration: ``costs.bnc_cost_terms``).
        ``bits`` and ``ops`` are exact; ``file_bytes`` (and the target's :meth:`estimate_bounds`)
        are at least the bytes the tables need, ``ceil(bits / 8)`` for BN models; None: no bound."""
        costs = facts if isinstance(facts, CostReport) else analytic_costs(facts)
        values: dict[str, Any] = {"ops": int(costs.n_ops), "bits": int(costs.size_bits)}
        if costs.kind == "bnc":
            values["file_bytes"] = table_bytes_lower_bound(costs)
        values.update(self.estimate_bounds(costs))
        return Measured(**{a: v for a, v in values.items() if a in self.axes})

    def estimate_bounds(self, costs: CostReport) -> dict[str, Any]:
        """Lower bounds of the target's own axes from analytic costs (none by default)."""
        return {}

    def cannot_fit(self, budget: Budget, facts: Any) -> list[tuple[str, int | float, int | float]]:
        """The budget axes that :meth:`estimate`'s lower bounds already exceed (non-empty: prune
        this configuration before training). ConfigError for an axis the target cannot measure."""
        self.check_budget(budget)
        return budget.exceeded(self.estimate(facts))

    def describe(self) -> dict[str, Any]:
        """Name, description, exports, measured axes with methods, unmeasurable axes, parity (JSON-ready)."""
        return {
            "name": self.name,
            "description": self.description,
            "exports": [{"format": e.format, "options": e.option_dict(), "kinds": list(e.kinds)} for e in self.exports],
            "axes": {a: self.all_methods()[a] for a in self.axes},
            "not_measurable": dict(self.not_measurable),
            "parity": self.parity,
        }


def table_bytes_lower_bound(costs: CostReport) -> int:
    """Bytes a BN model's tables need at least: ``ceil(B x |theta| / 8)`` (every exporter stores
    each entry in at least B bits)."""
    return math.ceil(int(costs.size_bits) / 8)


# ================================================================================================
# Registry
# ================================================================================================
_TARGETS: dict[str, Target] = {}
_discovered = False


def register_target(target: Target, *, overwrite: bool = False) -> Target:
    """Add ``target`` under its name (call at a ``target_*.py`` module's bottom); ConfigError when
    the name is taken, unless ``overwrite`` (:func:`bnc_deploy.registry.claim`)."""
    claim(_TARGETS, target.name, what=f"target {target.name!r}", overwrite=overwrite)
    _TARGETS[target.name] = target
    return target


def unregister_target(name: str) -> None:
    """Remove a registration (tests that register toy targets clean up with this)."""
    _TARGETS.pop(name, None)


def targets() -> dict[str, Target]:
    """Every registered target, after importing each ``target_*`` module of this package once."""
    _discover()
    return dict(_TARGETS)


def target_names() -> list[str]:
    """Names of the registered targets, sorted."""
    return sorted(targets())


def get_target(name: str) -> Target:
    """The target called ``name``; ConfigError listing the registered names otherwise."""
    found = targets().get(name)
    if found is None:
        raise ConfigError(f"unknown target {name!r}; targets: {', '.join(target_names())}")
    return found


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    package = importlib.import_module(__name__.rpartition(".")[0])
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("target_"):
            importlib.import_module(f"{package.__name__}.{info.name}")


__all__ = [
    "Export",
    "ExportedFile",
    "Target",
    "TargetMeasurement",
    "get_target",
    "register_target",
    "target_names",
    "targets",
    "unregister_target",
]
