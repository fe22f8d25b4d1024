"""The exporter registry: which (model kind, format) pairs exist, what options each declares.

An exporter is a pure function ``build(artifact, **options) -> bytes``: it turns a model file
(artifact) into the bytes of an exported file and never writes or runs anything. Writing,
running and publishing are the verifier's job (:mod:`bnc_deploy.verify`), the same for every
exporter. Each exporter module registers itself at its bottom (skl2onnx's
``register_converter(..., options=...)`` style)::

    register_exporter("bnc", "onnx", build_onnx_bytes, extension=".onnx", runtime="onnxruntime",
                      options=[Option("lowering", choices=LOWERINGS, default="gather", help=...), ...],
                      refusals=[Refusal("float tables have no codes", "pack_bits needs a quantized model",
                                        options={"pack_bits": True}, models=float_model), ...])

A (kind, format) is registered once: registering it again raises ConfigError naming both modules,
unless ``overwrite=True`` says the replacement is meant (skl2onnx's ``register_converter``).

:func:`exporters` imports every module of this package once (so a new exporter is one new file
plus its registration line, with no edit anywhere else) and returns the registry. Modules import
their framework (onnx, TensorFlow) lazily or at their top; a module whose framework is missing
is recorded in :func:`unavailable` with what to install, instead of breaking the others.

Options are declared, typed and documented here, and ``bnc-export`` builds its flags from them:
an option named ``pack_bits`` is the flag ``--pack-bits`` (a ``bool`` option that defaults to
True is switched off instead: ``self_test`` is the flag ``--no-self-test``). An option given to
an exporter that does not declare it is refused with a message saying which exporters take it; a
value outside an option's declared ``choices`` is refused naming the option, the value and the
choices.

What an exporter refuses on purpose is declared too (:class:`Refusal`, scikit-learn's
``expected_failed_checks`` in spirit): option values it refuses on some models, each with the
reason and the wording of its ExportError. The conformance matrix (``tests/test_conformance.py``)
expects every other (model, option value) to export and pass its checks, and every declared
refusal to happen, so neither a blanket refusal nor a stale declaration passes. Declarations are
for the matrix and readers; ``build`` still raises its own errors (direct callers bypass this).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bnc_deploy.errors import ExportError, MissingExtraError
from bnc_deploy.registry import claim

#: ``bool`` options are flags; ``int``/``str`` options take a value (``choices`` restricts it);
#: ``rows`` options are arrays the caller supplies (e.g. calibration rows), never a CLI flag.
OPTION_TYPES = ("bool", "int", "str", "rows")


@dataclass(frozen=True)
class Option:
    """One declared exporter option."""

    name: str
    type: str = "str"
    default: Any = None
    choices: tuple[Any, ...] = ()
    help: str = ""
    #: Set by the verifier, never by a user: no CLI flag (``lowering_timings`` of ``--lowering auto``).
    internal: bool = False
    #: What a value is called in "unknown <noun> 'x'" (default: the name, spaced): the exporter's own word.
    noun: str = ""

    def __post_init__(self) -> None:
        if self.type not in OPTION_TYPES:
            raise ValueError(f"option {self.name!r}: type must be one of {OPTION_TYPES}, got {self.type!r}")

    @property
    def flag(self) -> str:
        """The command-line flag: ``--NAME``, or ``--no-NAME`` for a bool option that defaults to True."""
        off = self.type == "bool" and self.default is True
        return ("--no-" if off else "--") + self.name.replace("_", "-")

    def check(self, value: Any, where: str) -> Any:
        """``value`` checked against the declared type (bool flags) and ``choices``; ExportError naming
        the option, the value and what it takes."""
        if self.type == "rows" or value is None:
            return value
        if self.type == "bool":
            if not isinstance(value, bool):
                raise ExportError(f"{where}: option {self.flag} takes true/false, got {value!r}")
            return value
        if self.choices and value not in self.choices:
            # The CLI merges the choices of every exporter (``--lowering gather-grouped`` parses for
            # tflite too), so the exporter's own list is enforced here, worded like the exporters'
            # own checks ("unknown lowering 'x'; choose one of ...") that direct build() callers get.
            noun = self.noun or self.name.replace("_", " ")
            raise ExportError(
                f"{where}: unknown {noun} {value!r} (option {self.flag}); "
                f"choose one of {', '.join(str(c) for c in self.choices)}"
            )
        # Ranges (an opset, a batch size) are the exporter's to check: it knows the domain and says why.
        return value


@dataclass(frozen=True)
class Refusal:
    """A declared refusal: ``build`` raises ExportError, on purpose, for ``options`` on ``models``.

    ``reason`` says why, for people; ``message`` is a regular expression (``re.search``) that the
    ExportError's text matches, so a refusal for another reason is not taken for this one.
    ``options`` (a mapping or ``(name, value)`` pairs) are values the *resolved* options all have
    (defaults included, so ``{"lowering": "gather-grouped", "ort_optimization": "disabled"}`` also
    covers a call that gives only the lowering); empty: whatever the options. ``models`` tells the
    refused artifacts (``float_model``); None: every artifact of the exporter's kind. A refusal
    names options or models or both: an exporter that refuses everything cannot declare it.
    """

    reason: str
    message: str
    options: tuple[tuple[str, Any], ...] | Mapping[str, Any] = ()
    models: Callable[[Any], bool] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.options, Mapping):
            object.__setattr__(self, "options", tuple(self.options.items()))  # frozen and hashable
        if not self.reason.strip() or not self.message.strip():
            raise ValueError("a declared refusal needs a reason and the ExportError message it expects")
        if not self.options and self.models is None:
            raise ValueError(f"refusal {self.reason!r} names neither options nor models: it would refuse everything")
        re.compile(self.message)

    def applies(self, artifact: Any, resolved: Mapping[str, Any]) -> bool:
        """Whether this refusal is declared for ``artifact`` exported with ``resolved`` options."""
        if any(resolved.get(name) != value for name, value in self.option_pairs):
            return False
        return self.models is None or bool(self.models(artifact))

    @property
    def option_pairs(self) -> tuple[tuple[str, Any], ...]:
        """``options`` as ``(name, value)`` pairs (``__post_init__`` stores a mapping as its pairs)."""
        return tuple(self.options.items()) if isinstance(self.options, Mapping) else self.options

    def matches(self, message: str) -> bool:
        return re.search(self.message, message) is not None


def float_model(artifact: Any) -> bool:
    """``models=`` of a refusal for float models (tables without integer codes)."""
    return not getattr(artifact, "is_quantized", True)


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
    #: What ``build`` refuses on purpose (:class:`Refusal`); anything else must export.
    refusals: tuple[Refusal, ...] = ()

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.options)

    def refusals_for(self, artifact: Any, given: Mapping[str, Any]) -> list[Refusal]:
        """The declared refusals that ``given`` options (resolved) on ``artifact`` hit; [] means it must export."""
        resolved = self.resolve_options(given)
        return [refusal for refusal in self.refusals if refusal.applies(artifact, resolved)]

    def resolve_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Declared defaults overlaid with ``given`` (unknown names refused, values checked)."""
        where = f"{self.format} export of a {self.kind} model"
        declared = {o.name: o for o in self.options}
        unknown = [name for name in given if name not in declared]
        if unknown:
            name = unknown[0]
            takers = [s for s in exporters().values() if name in s.option_names]
            flag = next((o.flag for s in takers for o in s.options if o.name == name), "--" + name.replace("_", "-"))
            kinds = sorted({s.kind for s in takers})
            if takers and self.kind not in kinds:
                raise ExportError(
                    f"{flag} applies to {' and '.join(_kind_description(k) for k in kinds)} only, "
                    f"not to {_kind_description(self.kind)}"
                )
            also = f"; it applies to: {', '.join(f'{s.format} ({s.kind})' for s in takers)}" if takers else ""
            raise ExportError(f"{flag} does not apply to the {where}{also}")
        return {name: option.check(given.get(name, option.default), where) for name, option in declared.items()}


#: (kind, format) -> ExporterSpec
_EXPORTERS: dict[tuple[str, str], ExporterSpec] = {}
#: module name -> why it could not be imported (what to install)
_UNAVAILABLE: dict[str, str] = {}
_discovered = False


def register_exporter(
    kind: str,
    format: str,
    build: Callable[..., bytes],
    *,
    extension: str,
    runtime: str,
    options: Iterable[Option] = (),
    description: str = "",
    refusals: Iterable[Refusal] = (),
    overwrite: bool = False,
) -> ExporterSpec:
    """Add the exporter of ``kind`` artifacts to ``format`` (call at a module's bottom).

    ``refusals``: what ``build`` refuses on purpose (:class:`Refusal`; each names declared options
    and values among their choices, else ValueError). A (kind, format) that is already registered
    raises ConfigError unless ``overwrite=True``: two modules claiming one format would otherwise
    leave whichever was imported last, silently.
    """
    spec = ExporterSpec(
        kind=kind,
        format=format,
        build=build,
        extension=extension,
        runtime=runtime,
        options=tuple(options),
        description=description,
        module=getattr(build, "__module__", ""),
        refusals=tuple(refusals),
    )
    declared = {option.name: option for option in spec.options}
    for refusal in spec.refusals:
        for name, value in refusal.option_pairs:
            option = declared.get(name)
            if option is None:
                raise ValueError(
                    f"{format} exporter of {kind} models: refusal {refusal.reason!r} names option "
                    f"{name!r}, which it does not declare"
                )
            if option.choices and value not in option.choices:
                raise ValueError(
                    f"{format} exporter of {kind} models: refusal {refusal.reason!r} names "
                    f"{option.flag} {value!r}, not one of its choices {option.choices}"
                )
    existing = _EXPORTERS.get((kind, format))
    claim(
        _EXPORTERS,
        (kind, format),
        what=f"an exporter of {kind} models to --format {format}",
        detail=(
            f" (by {existing.module or 'an unknown module'}); {spec.module or 'the new one'} cannot register it again"
            if existing
            else ""
        ),
        overwrite=overwrite,
    )
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
    raise ExportError(
        f"no exporter for --format {format}"
        + (f" ({missing})" if missing else "")
        + f"; available: {', '.join(formats())}"
    )


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
