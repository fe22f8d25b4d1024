"""The ``edgetpu`` deploy target: the Edge TPU lowering of a BN model (TFLite ``onehot-fc`` with the
``edgetpu`` one-hot builder: int8 from the input to the class scores).

Measured: ``file_bytes``, bits and ops. Checked (problems when not): the static Edge TPU report
(:func:`bnc_deploy.targets.edgetpu.edgetpu_compatibility`) maps a non-empty prefix, and that
prefix, run on the LiteRT CPU int8 kernels (:func:`bnc_deploy.targets.edgetpu_prefix.run_prefix`),
hands the CPU values that give the reference's class scores: every op up to the scores is mapped
and right. The Edge TPU compiler is not run (static approximation) and no Edge TPU is here: no
latency, no on-chip memory. Parity: the verifier (LiteRT) and the mapped prefix as above.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnc_deploy.targets.base import Export, ExportedFile, Target, register_target


class EdgeTPUTarget(Target):
    """Adds the static Edge TPU report and the mapped prefix's run to the measurement."""

    def check_files(
        self, artifact: Any, files: tuple[ExportedFile, ...], workdir: Path
    ) -> tuple[dict[str, Any], list[str]]:
        from bnc_deploy.targets.edgetpu import edgetpu_compatibility
        from bnc_deploy.targets.edgetpu_prefix import run_prefix

        path = files[0].path
        report = edgetpu_compatibility(path)
        summary = {k: report[k] for k in ("n_ops", "n_mapped", "n_cpu", "first_cpu_op", "fallback_ops")}
        if not report["n_mapped"]:
            return {"edgetpu": summary}, [f"{self.name}: no operator of {path.name} maps to the Edge TPU"]
        prefix = run_prefix(path, artifact, report)
        summary["prefix"] = {k: prefix.get(k) for k in ("runtime", "class_scores_equal", "exact_claimed", "exact")}
        problems = []
        if not prefix.get("class_scores_equal"):
            problems.append(f"{self.name}: the Edge TPU part of {path.name} does not determine the reference's scores")
        return {"edgetpu": summary}, problems


register_target(
    EdgeTPUTarget(
        name="edgetpu",
        description="Coral Edge TPU: int8 onehot-fc TFLite (edgetpu one-hot builder), BN models",
        exports=(Export("tflite", (("lowering", "onehot-fc"), ("onehot", "edgetpu")), kinds=("bnc",)),),
        not_measurable={
            "flash": "no Edge TPU compiler here: on-chip parameter memory is not measured",
            "ram": "no Edge TPU compiler here: on-chip memory is not measured",
            "latency_us": "no Edge TPU here",
            "instructions": "instructions are counted on emulated Cortex-M targets only",
        },
        parity="the verifier (LiteRT) and the mapped prefix on LiteRT's CPU int8 kernels against the reference",
    )
)
