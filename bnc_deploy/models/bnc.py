"""Naive Bayes and TAN classifiers in torch, with quantization-aware training.

Parameters are unnormalized log-probabilities ``rho``, normalized per conditional distribution
with a log-softmax over the feature's values (paper, Eq. 8). All features live in ONE padded
tensor ``rho`` of shape ``(D, P, K, C)``: feature ``i``, parent value ``p < |X_pa(i)|`` (``P = 1``
for naive Bayes), own value ``k < |X_i|``, class ``c``. Padding entries are held at a very
negative value so they take no probability mass. A forward pass is one log-softmax over the
whole tensor, one quantizer call, and ONE ``embedding_bag`` (gather + sum over features) with
per-row indices ``(i * P + x_pa(i)) * K + x_i`` precomputed from the data; there is no Python
loop over features. A leading configuration axis (many models in one tensor program) only adds
a dimension to ``rho`` and an offset to the indices.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from bnc_deploy.artifacts.bnc import BNCArtifact
from bnc_deploy.models._kernels import BNLogJoint
from bnc_deploy.models.ste import fixed_point_ste
from bnc_deploy.quantizers import FixedPointLogQuantizer

#: Value of padded ``rho`` entries: exp(-1e4) == 0 in float32, and it is finite (no NaN anywhere).
PAD = -1.0e4


def ml_log_counts(
    x: np.ndarray, y: np.ndarray, cardinalities: np.ndarray, parents: np.ndarray, n_classes: int, smoothing: float
) -> tuple[np.ndarray, np.ndarray]:
    """Maximum-likelihood initialisation: ``log(count + smoothing)`` (unnormalized).

    Returns ``(class_rho (C,), rho (D, P, K, C))`` in the model's padded layout.
    """
    d = len(cardinalities)
    k_max = int(max(cardinalities.max(initial=1), 1))
    p_card = _parent_cardinalities(cardinalities, parents)
    p_max = int(p_card.max(initial=1))
    counts = np.zeros((d, p_max, k_max, n_classes))
    parent_values = np.where(parents >= 0, x[:, np.where(parents >= 0, parents, 0)], 0)
    feature = np.broadcast_to(np.arange(d), x.shape)
    np.add.at(counts, (feature, parent_values, x, np.broadcast_to(y[:, None], x.shape)), 1.0)
    class_counts = np.bincount(y, minlength=n_classes).astype(np.float64)
    return np.log(class_counts + smoothing), np.log(counts + smoothing)


def _parent_cardinalities(cardinalities: np.ndarray, parents: np.ndarray) -> np.ndarray:
    safe = np.where(parents >= 0, parents, 0)
    return np.where(parents >= 0, cardinalities[safe], 1).astype(np.int64)


class BayesNetClassifier(nn.Module):
    """A naive Bayes (all parents ``-1``) or TAN classifier over discrete features.

    Parameters
    ----------
    cardinalities : array (D,) of ints >= 1
    n_classes : int >= 2
    parents : array (D,) of ints, ``-1`` for the class only; None means naive Bayes
    quantizer : FixedPointLogQuantizer or None (float model)
    init : "uniform" (rho ~ U(-0.1, 0.1), the paper's) or "ml" (log counts + smoothing; needs data)
    data : (x, y) training codes for ``init="ml"``
    smoothing : float, pseudo-count for ``init="ml"`` (default add-one)
    generator : torch.Generator for the uniform initialisation
    """

    def __init__(
        self,
        cardinalities,
        n_classes: int,
        parents=None,
        quantizer: FixedPointLogQuantizer | None = None,
        init: str = "uniform",
        data=None,
        smoothing: float = 1.0,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        cardinalities = np.asarray(cardinalities, dtype=np.int64)
        d = cardinalities.shape[0]
        parents = np.full(d, -1, dtype=np.int64) if parents is None else np.asarray(parents, dtype=np.int64)
        if n_classes < 2:
            raise ValueError(f"a classifier needs at least 2 classes, got {n_classes}")
        if parents.shape != (d,):
            raise ValueError(f"parents must have shape ({d},), got {parents.shape}")
        self.cardinalities = cardinalities
        self.parents = parents
        self.n_classes = int(n_classes)
        self.quantizer = quantizer
        p_card = _parent_cardinalities(cardinalities, parents)
        self.parent_cardinalities = p_card
        self.k_max = int(cardinalities.max(initial=1))
        self.p_max = int(p_card.max(initial=1))

        shape = (d, self.p_max, self.k_max, self.n_classes)
        if init == "uniform":
            rho = torch.rand(shape, generator=generator) * 0.2 - 0.1
            class_rho = torch.rand((self.n_classes,), generator=generator) * 0.2 - 0.1
        elif init == "ml":
            if data is None:
                raise ValueError('init="ml" needs the training data (x, y)')
            class_np, rho_np = ml_log_counts(
                np.asarray(data[0]), np.asarray(data[1]), cardinalities, parents, self.n_classes, smoothing
            )
            rho, class_rho = torch.tensor(rho_np, dtype=torch.float32), torch.tensor(class_np, dtype=torch.float32)
        else:
            raise ValueError(f"unknown init {init!r}: use 'uniform' or 'ml'")
        valid = (torch.arange(self.k_max)[None, None, :] < torch.as_tensor(cardinalities)[:, None, None]) & (
            torch.arange(self.p_max)[None, :, None] < torch.as_tensor(p_card)[:, None, None]
        )
        self.register_buffer("valid", valid[..., None].expand(shape).contiguous(), persistent=False)
        self.rho = nn.Parameter(torch.where(self.valid, rho, torch.full_like(rho, PAD)))
        self.class_rho = nn.Parameter(class_rho)
        # Index pieces: flat row of (feature i, parent value p, value k) is (i * P + p) * K + k.
        self.register_buffer(
            "_feature_base", torch.arange(d, dtype=torch.int64) * self.p_max * self.k_max, persistent=False
        )
        self.register_buffer("_parent_index", torch.as_tensor(np.where(parents >= 0, parents, 0)), persistent=False)
        self.register_buffer("_has_parent", torch.as_tensor(parents >= 0), persistent=False)

    # -- indices ------------------------------------------------------------------------------
    def flat_indices(self, x) -> torch.Tensor:
        """Rows of the flattened table for each (row, feature), shape (n, D), int64.

        Compute once per data set: it depends on the data and structure, not on parameters.
        """
        x = torch.as_tensor(np.asarray(x), dtype=torch.int64)
        parent_values = torch.where(self._has_parent, x[:, self._parent_index], torch.zeros_like(x))
        return self._feature_base + parent_values * self.k_max + x

    # -- parameters ---------------------------------------------------------------------------
    def log_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalized (and, if quantizing, quantized) ``(class (C,), tables (D, P, K, C))``."""
        # Padding entries of rho start at PAD and never move: their gradient is exactly zero
        # (never gathered, softmax weight exp(-1e4) == 0), so no masking op is needed here.
        theta = torch.log_softmax(self.rho, dim=2)
        class_theta = torch.log_softmax(self.class_rho, dim=0)
        if self.quantizer is not None:
            theta, class_theta = fixed_point_ste(theta, self.quantizer), fixed_point_ste(class_theta, self.quantizer)
        return class_theta, theta

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        """``log p(c, x)`` of shape (n, C) from precomputed ``flat_indices`` (n, D).

        Equal to ``class_theta + theta.reshape(-1, C)[indices].sum(1)`` with ``log_tables()``; the
        hand-written backward (``_kernels.BNLogJoint``) keeps the training step to one graph node.
        """
        return BNLogJoint.apply(self.rho, self.class_rho, indices, self.quant_params)

    @property
    def quant_params(self) -> tuple[int, float] | None:
        """``(B_F, U)`` for the kernels, or None for a float model."""
        return None if self.quantizer is None else (self.quantizer.frac_bits, self.quantizer.max_magnitude)

    @torch.no_grad()
    def predict(self, x) -> np.ndarray:
        return self(self.flat_indices(x)).argmax(dim=1).numpy()

    # -- artifact -----------------------------------------------------------------------------
    @torch.no_grad()
    def to_artifact(
        self, class_names, feature_names, discretizer=None, metadata=None, check_x=None, check_y=None
    ) -> BNCArtifact:
        """Freeze the trained model into a framework-neutral :class:`BNCArtifact`."""
        if not torch.all(self.rho[~self.valid] == PAD):
            raise RuntimeError("padding entries of rho changed during training (weight decay?); tables are invalid")
        class_theta, theta = (t.double().numpy() for t in self.log_tables())
        blocks = []
        for i, (k, p) in enumerate(zip(self.cardinalities, self.parent_cardinalities)):
            # Stacked row offset_i + x_i * |X_pa| + x_pa  <-  theta[i, x_pa, x_i, :]
            blocks.append(theta[i, :p, :k, :].transpose(1, 0, 2).reshape(k * p, self.n_classes))
        table = np.concatenate(blocks, axis=0) if blocks else np.zeros((0, self.n_classes))
        common = dict(
            parents=self.parents,
            cardinalities=self.cardinalities,
            class_names=class_names,
            feature_names=feature_names,
            discretizer=discretizer,
            metadata=metadata or {},
            check_x=check_x,
            check_y=check_y,
        )
        if self.quantizer is not None:
            q = self.quantizer
            return BNCArtifact(
                quantizer=q, class_codes=q.to_codes(class_theta), table_codes=q.to_codes(table), **common
            )
        return BNCArtifact(class_logp=class_theta.astype(np.float32), table_logp=table.astype(np.float32), **common)
