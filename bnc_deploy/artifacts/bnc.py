"""The Bayesian network classifier artifact: what a trained NB/TAN model *is*, without torch.

Tables are stacked in the layout every exporter uses. Feature ``i`` with parent ``pa(i)``
(``-1``: the class only) owns ``|X_i| * |X_pa(i)|`` consecutive rows starting at ``offset_i``
(``|X_pa(i)| = 1`` for the class only); row ``offset_i + x_i * |X_pa(i)| + x_pa(i)`` holds
``log p(X_i = x_i | X_pa(i) = x_pa(i), C = c)`` in column ``c``. The class prior is separate.

Quantized models keep integer codes (uint8) with ``theta_q = -code * 2**-B_F``; float models
keep float32 log-probabilities. Both predict with ``argmax_c log p(c, x)`` (first maximum wins).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bnc_deploy.artifacts.common import FeatureSpaceMixin
from bnc_deploy.artifacts.container import ArtifactError
from bnc_deploy.quantizers import FixedPointLogQuantizer, UnsupportedBitWidth

KIND = "bnc"
FLOAT_BITS = 32


@dataclass
class BNCArtifact(FeatureSpaceMixin):
    """A trained Bayesian network classifier (naive Bayes or TAN).

    Attributes
    ----------
    parents : ndarray (n_features,), int64
        Parent feature of each feature, ``-1`` for the class only (naive Bayes: all ``-1``).
    cardinalities : ndarray (n_features,), int64
    class_names, feature_names : list of str
    quantizer : FixedPointLogQuantizer or None
        None for a float model.
    class_codes : ndarray (n_classes,), uint8  | None     (quantized)
    table_codes : ndarray (n_rows, n_classes), uint8 | None
    class_logp : ndarray (n_classes,), float32 | None      (float)
    table_logp : ndarray (n_rows, n_classes), float32 | None
    discretizer : dict or None
        ``FayyadIraniDiscretizer.to_dict()`` when raw values were discretized.
    metadata : dict
        Training facts: data, hyper-parameters, seeds, errors, history, library version.
    check_x : ndarray (n_check, n_features), uint8/int | None
        Rows kept with the model so exporters can verify an exported file without the dataset.
    check_y : ndarray (n_check,) | None
    """

    parents: np.ndarray
    cardinalities: np.ndarray
    class_names: list
    feature_names: list
    quantizer: FixedPointLogQuantizer | None = None
    class_codes: np.ndarray | None = None
    table_codes: np.ndarray | None = None
    class_logp: np.ndarray | None = None
    table_logp: np.ndarray | None = None
    discretizer: dict | None = None
    metadata: dict = field(default_factory=dict)
    check_x: np.ndarray | None = None
    check_y: np.ndarray | None = None

    kind = KIND
    #: How messages name models of this kind (plural).
    kind_description = "Bayesian network classifiers"

    def __post_init__(self) -> None:
        self.parents = np.asarray(self.parents, dtype=np.int64)
        self._normalize_feature_space()
        self.validate()

    # -- structure facts ----------------------------------------------------------------------
    @property
    def structure(self) -> str:
        """``"nb"`` when no feature has a parent feature, else ``"tan"``."""
        return "nb" if np.all(self.parents < 0) else "tan"

    @property
    def is_quantized(self) -> bool:
        return self.quantizer is not None

    @property
    def parent_cardinalities(self) -> np.ndarray:
        """``|X_pa(i)|`` per feature, 1 for the class only. Shape (n_features,)."""
        safe = np.where(self.parents >= 0, self.parents, 0)
        return np.where(self.parents >= 0, self.cardinalities[safe], 1).astype(np.int64)

    @property
    def rows_per_feature(self) -> np.ndarray:
        return self.cardinalities * self.parent_cardinalities

    @property
    def row_offsets(self) -> np.ndarray:
        """First stacked row of each feature, shape (n_features,)."""
        rows = self.rows_per_feature
        return np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64) if rows.size else rows

    @property
    def n_rows(self) -> int:
        return int(self.rows_per_feature.sum())

    # -- cost facts (the paper's conventions; the profiler documents them) -----------------------
    @property
    def bits_per_parameter(self) -> int:
        return self.quantizer.total_bits if self.quantizer else FLOAT_BITS

    @property
    def n_parameters(self) -> int:
        """Table entries, class prior included: ``C * (1 + sum_i |X_i| * |X_pa(i)|)``."""
        return self.n_classes * (1 + self.n_rows)

    @property
    def size_bits(self) -> int:
        return self.n_parameters * self.bits_per_parameter

    @property
    def n_ops(self) -> int:
        """Additions to accumulate ``D + 1`` terms per class: ``D * C`` (argmax not counted)."""
        return self.n_features * self.n_classes

    def report_facts(self) -> dict:
        """What a report (bnc-export, bnc-profile) says about the model beyond its costs."""
        return {"model_kind": self.kind, "structure": self.structure}

    # -- tables -----------------------------------------------------------------------------
    def row_indices(self, x: np.ndarray) -> np.ndarray:
        """Stacked-table row of every (row, feature), shape (n, n_features), int64.

        ``x`` must already be validated (``bnc_deploy.validation.check_codes``).
        """
        x = np.asarray(x, dtype=np.int64)
        parent_values = np.where(self.parents >= 0, x[:, np.where(self.parents >= 0, self.parents, 0)], 0)
        return self.row_offsets[None, :] + x * self.parent_cardinalities[None, :] + parent_values

    def log_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``(class_logp (C,), table_logp (n_rows, C))`` as float64 (dequantized if quantized)."""
        if self.quantizer is not None:
            return self.quantizer.from_codes(self.class_codes), self.quantizer.from_codes(self.table_codes)
        return self.class_logp.astype(np.float64), self.table_logp.astype(np.float64)

    def feature_table(self, i: int) -> np.ndarray:
        """Log-probabilities of feature ``i``, shape (|X_i|, |X_pa(i)|, C), float64."""
        _, table = self.log_tables()
        start, rows = int(self.row_offsets[i]), int(self.rows_per_feature[i])
        return table[start : start + rows].reshape(int(self.cardinalities[i]), int(self.parent_cardinalities[i]), -1)

    # -- validation --------------------------------------------------------------------------
    def validate(self) -> None:
        """Check internal consistency; raise ArtifactError naming the problem."""
        d, c = self.n_features, self.n_classes
        if c < 2:
            raise ArtifactError(f"a classifier needs at least 2 classes, got {c}")
        if self.parents.shape != (d,):
            raise ArtifactError(f"parents has shape {self.parents.shape}, expected ({d},)")
        if len(self.feature_names) != d:
            raise ArtifactError(f"{len(self.feature_names)} feature names for {d} features")
        if d and self.cardinalities.min() < 1:
            i = int(np.argmin(self.cardinalities))
            raise ArtifactError(f"feature {i} has cardinality {int(self.cardinalities[i])} (must be >= 1)")
        if d and (self.parents.min() < -1 or self.parents.max() >= d):
            i = int(np.argmax((self.parents < -1) | (self.parents >= d)))
            raise ArtifactError(f"feature {i} has parent {int(self.parents[i])}, outside -1..{d - 1}")
        check_acyclic(self.parents)
        shapes = {"class": (c,), "table": (self.n_rows, c)}
        if self.quantizer is not None:
            arrays = {"class": self.class_codes, "table": self.table_codes}
            for part, array in arrays.items():
                if array is None or array.dtype != np.uint8 or array.shape != shapes[part]:
                    got = None if array is None else (array.dtype, array.shape)
                    raise ArtifactError(f"{part} codes must be uint8 of shape {shapes[part]}, got {got}")
                if array.size and int(array.max()) > self.quantizer.max_code:
                    raise ArtifactError(
                        f"{part} code {int(array.max())} exceeds {self.quantizer.max_code} "
                        f"for {self.quantizer.total_bits}-bit parameters"
                    )
        else:
            arrays = {"class": self.class_logp, "table": self.table_logp}
            for part, array in arrays.items():
                if array is None or array.dtype != np.float32 or array.shape != shapes[part]:
                    got = None if array is None else (array.dtype, array.shape)
                    raise ArtifactError(f"{part} log-probabilities must be float32 of shape {shapes[part]}, got {got}")
                if not np.all(np.isfinite(array)) or (array.size and array.max() > 0):
                    raise ArtifactError(f"{part} log-probabilities must be finite and <= 0")
        self._validate_check_set()

    # -- (de)serialisation --------------------------------------------------------------------
    def to_header_and_arrays(self) -> tuple[dict, dict]:
        header = {
            "kind": KIND,
            "structure": self.structure,
            "n_features": self.n_features,
            "n_classes": self.n_classes,
            "class_names": self.class_names,
            "feature_names": self.feature_names,
            "quantization": self.quantizer.describe() if self.quantizer else None,
            "discretizer": self.discretizer,
            "metadata": self.metadata,
            "summary": {"n_parameters": self.n_parameters, "size_bits": self.size_bits, "n_ops": self.n_ops},
        }
        arrays = {"parents": self.parents, "cardinalities": self.cardinalities}
        if self.quantizer is not None:
            arrays.update(class_codes=self.class_codes, table_codes=self.table_codes)
        else:
            arrays.update(class_logp=self.class_logp, table_logp=self.table_logp)
        if self.check_x is not None:
            arrays.update(check_x=self.check_x, check_y=self.check_y)
        return header, arrays

    @classmethod
    def from_header_and_arrays(cls, header: dict, arrays: dict, where: str = "model") -> BNCArtifact:
        try:
            quantization = header.get("quantization")
            quantizer = None
            if quantization is not None:
                quantizer = FixedPointLogQuantizer(int(quantization["total_bits"]), int(quantization["int_bits"]))
            required = ["parents", "cardinalities"] + (
                ["class_codes", "table_codes"] if quantizer else ["class_logp", "table_logp"]
            )
            missing = [name for name in required if name not in arrays]
            if missing:
                raise ArtifactError(f"missing arrays {missing}")
            return cls(
                parents=arrays["parents"],
                cardinalities=arrays["cardinalities"],
                class_names=header["class_names"],
                feature_names=header["feature_names"],
                quantizer=quantizer,
                class_codes=arrays.get("class_codes"),
                table_codes=arrays.get("table_codes"),
                class_logp=arrays.get("class_logp"),
                table_logp=arrays.get("table_logp"),
                discretizer=header.get("discretizer"),
                metadata=header.get("metadata", {}),
                check_x=arrays.get("check_x"),
                check_y=arrays.get("check_y"),
            )
        except UnsupportedBitWidth as exc:
            raise ArtifactError(f"{where}: {exc}") from None
        except ArtifactError as exc:
            raise ArtifactError(f"{where}: {exc}") from None
        except (KeyError, TypeError) as exc:
            raise ArtifactError(f"{where}: malformed header ({exc!r})") from None


def check_acyclic(parents: np.ndarray) -> None:
    """Raise ArtifactError if following parents ever loops (TAN structures are forests)."""
    d = parents.shape[0]
    state = np.zeros(d, dtype=np.int8)  # 0 unseen, 1 on current path, 2 done
    for start in range(d):
        path = []
        node = start
        while node >= 0 and state[node] == 0:
            state[node] = 1
            path.append(node)
            node = int(parents[node])
        if node >= 0 and state[node] == 1:
            raise ArtifactError(f"parents contain a cycle through feature {node}")
        state[path] = 2
