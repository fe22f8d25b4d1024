"""Training (the only stage besides ``models/`` that imports torch): datasets in, model files out.

One module per model family (``bnc.py``: naive Bayes and TAN; ``dnn.py``: the quantized FC/CNN
baselines), plus what they share (``loop.py``: the one epoch loop; ``common.py``: schedules,
history, check set, metadata; ``losses.py``), structure learning (``chow_liu.py``,
``structure_learning.py``, ``candidate_sets.py``: orderings and candidate parents,
``structure_sweep.py``), the batched trainer (``bnc_batched.py``, ``bnc_batched_step.py``)
and budget sizing (``sizing.py``).

``bnc-train`` knows the families only through :data:`TRAINERS`: each ``--model`` name maps to a
:class:`TrainerSpec` naming its family and that family's :class:`TrainerFamily` adapter as a lazy
``"module:attribute"`` target (``bnc_cli.py``, ``dnn_cli.py``), so listing the models imports no
torch. The adapter declares the family's flags, turns the parsed arguments into the family's
validated configuration, trains, and reports the family's ``--json`` keys and summary.

A new model family is one module (its trainer and a :class:`TrainerFamily` object) plus one
:func:`register_trainer` line per ``--model`` name below; no CLI edit.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol

from bnc_deploy.registry import claim


class TrainerFamily(Protocol):
    """What ``bnc-train`` needs from a model family. Every family's flags are parsed for every
    ``--model``; :meth:`flags_given` is how the CLI refuses a family's flags for another's model.

    The shared flags every model accepts (``--data``, ``--fold``, ``--validation``, ``--epochs``,
    ``--batch-size``, ``--lr``, ``--lr-decay`` (None: the family's default), ``--loss``,
    ``--hybrid-*``, ``--adam-eps``, ``--seed``, ``-o``) are declared by the CLI itself.
    """

    def add_arguments(self, parser, model_group) -> None:
        """Declare the family's flags, into ``model_group`` or a group of the family's own."""

    def flags_given(self, args) -> list[str]:
        """The family's own flags set on the command line (``["--layers", ...]``), in a fixed order."""

    def foreign_flag_hint(self, flags: list[str]) -> str:
        """Appended to the refusal of another family's ``flags`` for this family's model ("" for none)."""

    def config_from_args(self, args, *, progress: bool):
        """The validated training configuration (has ``.epochs``), before any data is loaded.

        Raises ConfigError (or UnsupportedBitWidth) naming the flag for a bad or inapplicable value.
        """

    def input_paths(self, args) -> tuple:
        """Files the run reads besides ``--data`` (``-o`` must not overwrite them)."""

    def train(self, dataset, config):
        """Train on ``dataset``; a :class:`~bnc_deploy.train.common.TrainResult`."""

    def summary(self, result, dataset, config) -> dict:
        """The family's ``--json`` keys, added to the keys every model reports."""

    def format_summary(self, summary: dict) -> str:
        """The human-readable summary of the full ``--json`` object."""


@dataclass(frozen=True)
class TrainerSpec:
    """A ``bnc-train --model`` choice: its family and where the family's adapter lives.

    ``target`` is ``"module:attribute"`` naming a :class:`TrainerFamily` object; it is imported
    only by :meth:`load`.
    """

    name: str
    family: str
    target: str
    help: str = ""

    def load(self) -> TrainerFamily:
        module, _, attribute = self.target.partition(":")
        return getattr(importlib.import_module(module), attribute)


#: ``--model`` name -> TrainerSpec, in registration order (the order of ``--help``).
TRAINERS: dict[str, TrainerSpec] = {}

#: ``bnc-train``'s model when ``--model`` is not given.
DEFAULT_TRAINER = "nb"


def register_trainer(name: str, family: str, target: str, help: str = "", *, overwrite: bool = False) -> None:
    """Add the trainer behind ``bnc-train --model NAME`` (ConfigError for a taken name unless
    ``overwrite``: :func:`bnc_deploy.registry.claim`)."""
    claim(TRAINERS, name, what=f"trainer --model {name}", overwrite=overwrite)
    TRAINERS[name] = TrainerSpec(name, family, target, help)


def families() -> dict[str, list[str]]:
    """Family -> its ``--model`` names, both in registration order."""
    grouped: dict[str, list[str]] = {}
    for spec in TRAINERS.values():
        grouped.setdefault(spec.family, []).append(spec.name)
    return grouped


register_trainer("nb", "bnc", "bnc_deploy.train.bnc_cli:FAMILY", "naive Bayes")
register_trainer("tan", "bnc", "bnc_deploy.train.bnc_cli:FAMILY", "tree-augmented naive Bayes")
register_trainer("fc", "dnn", "bnc_deploy.train.dnn_cli:FAMILY", "quantized fully connected net")
register_trainer("cnn", "dnn", "bnc_deploy.train.dnn_cli:FAMILY", "quantized CNN")
