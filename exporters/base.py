"""The exporter registry: which (model kind, format) pairs exist, what options each declares.

An exporter is a pure function ``build(artifact, **options) -> bytes``: it turns a model file
(artifact) into the bytes of an exported file and never writes or runs anything. Writing,
running and publishing are the verifier's job (:mod:`bnc_deploy.verify`), the same for every
exporter. Each exporter module registers itself at its bottom (skl2onnx's
``register_converter(..., options=...)`` style)::

    register_exporter("bnc", "onnx", build_onnx_bytes, extension=".onnx", runtime="onnxruntime",
                      options=[Option("lowering", choices=LOWERINGS, default="gather", help=...), ...])

:func:`exporters` imports every module of this package once (so a new exporter is one new file
plus its registration line, with no edit anywhere else) and returns the registry. Modules import
their framework (onnx, TensorFlow) lazily or at their top; a module whose framework is missing
is recorded in :func:`unavailable` with what to install, instead of breaking the others.

Options are declared, typed and documented here, and ``bnc-export`` builds its flags from them:
an option named ``pack_bits`` is the flag ``--pack-bits``. An option given to an exporter that
does not declare it is refused with a message saying which exporters take it.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

from bnc_deploy.errors import ExportError, MissingExtraError

#: ``bool`` options are flags; ``int``/``str`` options take a value (``choices`` restricts it);
#: ``rows`` options are arrays the caller supplies (e.g. calibration rows), never a CLI flag.
OPTION_TYPES = ("bool", "int", "str", "rows")


@dataclass(frozen=True)
class Option:
    """One declared exporter option."""

    name: str
    type: str = "str"
    default: Any = None
    choices: tuple = ()
    help: str = ""
    #: Set by the verifier, never by a user: no CLI flag (``lowering_timings`` of ``--lowering auto``).
    internal: bool = False

    def __post_init__(self) -> None:
        if self.type not in OPTION_TYPES:
            raise ValueError(f"option {self.name!r}: type must be one of {OPTION_TYPES}, got {self.type!r}")

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value, where: str):
        """``value`` checked against the declared type (bool flags); ExportError naming the option."""
        if self.type == "rows" or value is None:
            return value
        if self.type == "bool":
            if not isinstance(value, bool):
                raise ExportError(f"{where}: option {self.flag} takes true/false, got {value!r}")
            return value
        # Values (ranges, choices) are the exporter's to check: it knows the domain and says why
        # (e.g. "unknown lowering 'x'; choose one of ..."); the CLI offers only the declared choices.
        return value


@dataclass(frozen=True)
class ExporterSpec:
    """A registered exporter: ``build`` for ``kind`` artifacts into ``format`` files."""

    kind: str
    format: str
    build: Callable[..., bytes]
    extension: str
    runtime: str
    options: tuple[Option, ...] = ()
    description: str = ""
    module: str = field(default="", compare=False)

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.options)

    def resolve_options(self, given: dict) -> dict:
        """Declared defaults overlaid with ``given`` (unknown names refused, values checked)."""
        where = f"{self.format} export of a {self.kind} model"
        declared = {o.name: o for o in self.options}
        unknown = [name for name in given if name not in declared]
        if unknown:
            name = unknown[0]
            takers = [s for s in exporters().values() if name in s.option_names]
            flag = "--" + name.replace("_", "-")
            kinds = sorted({s.kind for s in takers})
            if takers and self.kind not in kinds:
                raise ExportError(f"{flag} applies to {' and '.join(_kind_description(k) for k in kinds)} only, "
                                  f"not to {_kind_description(self.kind)}")
            also = f"; it applies to: {', '.join(f'{s.format} ({s.kind})' for s in takers)}" if takers else ""
            raise ExportError(f"{flag} does not apply to the {where}{also}")
        return {name: option.check(given.get(name, option.default), where) for name, option in declared.items()}


#: (kind, format) -> ExporterSpec
_EXPORTERS: dict[tuple[str, str], ExporterSpec] = {}
#: module name -> why it could not be imported (what to install)
_UNAVAILABLE: dict[str, str] = {}
_discovered = False


def register_exporter(kind: str, format: str, build: Callable[..., bytes], *, extension: str, runtime: str,
                      options=(), description: str = "") -> ExporterSpec:
    """Add or replace the exporter of ``kind`` artifacts to ``format`` (call at a module's bottom)."""
    spec = ExporterSpec(kind=kind, format=format, build=build, extension=extension, runtime=runtime,
                        options=tuple(options), description=description,
                        module=getattr(build, "__module__", ""))
    _EXPORTERS[(kind, format)] = spec
    return spec


def unregister_exporter(kind: str, format: str) -> None:
    """Remove a registration (tests that register toy exporters clean up with this)."""
    _EXPORTERS.pop((kind, format), None)


def exporters() -> dict[tuple[str, str], ExporterSpec]:
    """Every registered exporter, after importing each module of this package once."""
    _discover()
    return dict(_EXPORTERS)


def formats() -> list[str]:
    """Format names with at least one registered exporter, sorted."""
    return sorted({fmt for _, fmt in exporters()})


def unavailable() -> dict[str, str]:
    """Exporter modules that could not be imported here, with the reason (a missing extra)."""
    _discover()
    return dict(_UNAVAILABLE)


def exporter_for(kind: str, format: str) -> ExporterSpec:
    """The exporter of ``kind`` artifacts to ``format``; ExportError saying what exists otherwise."""
    registry = exporters()
    spec = registry.get((kind, format))
    if spec is not None:
        return spec
    kinds = sorted(k for k, f in registry if f == format)
    if kinds:
        raise ExportError(f"--format {format} exports {', '.join(kinds)} models, not {kind} models")
    missing = "; ".join(_UNAVAILABLE.values())
    raise ExportError(f"no exporter for --format {format}" + (f" ({missing})" if missing else "")
                      + f"; available: {', '.join(formats())}")


def _kind_description(kind: str) -> str:
    from bnc_deploy.artifacts import ARTIFACT_KINDS

    cls = ARTIFACT_KINDS.get(kind)
    return getattr(cls, "kind_description", f"{kind} models")


def _discover() -> None:
    """Import every exporter module of this package once (each registers itself at its bottom)."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    package = importlib.import_module(__name__.rpartition(".")[0])
    for info in pkgutil.iter_modules(package.__path__):
        if info.name == "base" or info.name.startswith("_"):
            continue
        name = f"{package.__name__}.{info.name}"
        try:
            importlib.import_module(name)
        except MissingExtraError as exc:
            _UNAVAILABLE[name] = str(exc)
        except ImportError as exc:
            if (exc.name or "").startswith("bnc_deploy"):
                raise  # our own bug, not a missing extra
            _UNAVAILABLE[name] = f"{info.name} needs {exc.name or exc}: pip install 'bnc-deploy[convert]'"
