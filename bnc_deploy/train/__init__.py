"""Training (the only stage besides ``models/`` that imports torch): datasets in, model files out.

One module per model family (``bnc.py``: naive Bayes and TAN; ``dnn.py``: the quantized FC/CNN
baselines), plus what they share (``common.py``: schedules, history, check set, metadata;
``losses.py``), structure learning (``chow_liu.py``, ``structure_learning.py``,
``structure_sweep.py``) and budget sizing (``sizing.py``).

:data:`TRAINERS` maps each ``bnc-train --model`` name to its family's trainer as a lazy
``"module:function"`` target, so listing the models imports no torch. A new model family is one
module plus one :func:`register_trainer` line.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class TrainerSpec:
    """A ``bnc-train --model`` choice: the family it trains and where its trainer lives.

    ``target`` is ``"module:function"``; the function takes ``(dataset, args)`` (the parsed
    ``bnc-train`` arguments) and returns a :class:`~bnc_deploy.train.common.TrainResult`.
    """

    name: str
    family: str
    target: str
    help: str = ""

    def load(self):
        module, _, function = self.target.partition(":")
        return getattr(importlib.import_module(module), function)


#: ``--model`` name -> TrainerSpec.
TRAINERS: dict[str, TrainerSpec] = {}


def register_trainer(name: str, family: str, target: str, help: str = "") -> None:
    """Add or replace the trainer behind ``bnc-train --model NAME``."""
    TRAINERS[name] = TrainerSpec(name, family, target, help)


register_trainer("nb", "bnc", "bnc_deploy.train.bnc:train_from_args", "naive Bayes")
register_trainer("tan", "bnc", "bnc_deploy.train.bnc:train_from_args", "tree-augmented naive Bayes")
register_trainer("fc", "dnn", "bnc_deploy.train.dnn:train_from_args", "quantized fully connected net")
register_trainer("cnn", "dnn", "bnc_deploy.train.dnn:train_from_args", "quantized CNN")
