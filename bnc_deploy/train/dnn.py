"""Training quantized DNN baselines: data -> encoded inputs -> torch net -> :class:`DNNArtifact`.

Cross-entropy, Adam, learning rate decaying log-linearly per epoch from ``lr`` to
``lr * lr_decay`` (paper: ``lr0 in {3e-2, 3e-3, 3e-4}`` decaying to ``lr0 * 1e-4``), reshuffled
every epoch with the last incomplete batch dropped, seeded; a tqdm progress bar and the
per-epoch history (lr, loss, train/val/test error, seconds) stored in the artifact.
:func:`train_dnn` is the batched trainer (:mod:`bnc_deploy.train.dnn_batched`) with one
configuration, so a configuration of a sweep is the same model as its single run.

Widths come from ``hidden`` (explicit) or from the budget matcher in :mod:`bnc_deploy.train.sizing`
(``match_bits`` / ``match_ops``, the paper's accounting); the achieved bits and operations are
reported next to the target. The configuration, encoding, widths and model file are
:mod:`bnc_deploy.train.dnn_model`, re-exported here.
"""

from __future__ import annotations

from bnc_deploy.datasets.base import DiscreteDataset
from bnc_deploy.train.common import TrainResult
from bnc_deploy.train.dnn_model import (
    EVAL_ROWS,
    PAPER_LEARNING_RATES,
    DNNConfig,
    InputSpec,
    build_model,
    input_spec,
    predict_torch,
    resolve_widths,
)

__all__ = [
    "EVAL_ROWS",
    "PAPER_LEARNING_RATES",
    "DNNConfig",
    "InputSpec",
    "build_model",
    "input_spec",
    "predict_torch",
    "resolve_widths",
    "train_dnn",
]


def train_dnn(dataset: DiscreteDataset, config: DNNConfig) -> TrainResult:
    """Train a quantized FC/CNN on ``dataset``; return the artifact (checked against torch).

    The batched trainer (:func:`bnc_deploy.train.dnn_batched.train_dnn_batched`) with this one
    configuration: one implementation of the training step, so a configuration trained in a
    batched sweep is the same model as this run (on the CPU, bit for bit).
    """
    from bnc_deploy.train.dnn_batched import train_dnn_batched

    (run,) = train_dnn_batched(dataset, [config], progress=config.progress)
    if run.error is not None:
        raise FloatingPointError(run.error)
    assert run.result is not None
    return run.result
