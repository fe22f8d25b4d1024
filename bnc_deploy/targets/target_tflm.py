"""The ``tflm`` deploy target: TensorFlow Lite for Microcontrollers, the micro-profile TFLite export.

**ram** is the tensor arena: the smallest arena (16-byte steps) in which the TFLite Micro
interpreter allocates and runs the file, measured by the exporter on the exported bytes and
recorded in its metadata (``tflm.arena_bytes``, ``exporters/_tflite.py``'s
``measure_tflm_arena``); None (a problem of the measurement) when tflite-micro is not installed.
The interpreter's own code and the flatbuffer's flash are not measured (no target toolchain
builds TFLM here): flash is not a budget of this target; the flatbuffer is ``file_bytes``.
Parity: the verifier (LiteRT) and the file run again in the ``tflm`` runtime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnc_deploy.targets.base import Export, ExportedFile, Target, register_target


class TFLMTarget(Target):
    """Reads the arena the exporter measured from the verified file's metadata."""

    def measure_files(
        self, artifact: Any, files: tuple[ExportedFile, ...], workdir: Path, axes: tuple[str, ...]
    ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
        tflm = dict(files[0].result.metadata.get("tflm") or {})
        arena = tflm.get("arena_bytes")
        problems = [] if arena is not None else [f"{self.name}: arena not measured: {tflm.get('arena_measured_with')}"]
        return {"ram": None if arena is None else int(arena)}, {"tflm": tflm}, problems


register_target(
    TFLMTarget(
        name="tflm",
        description="TensorFlow Lite for Microcontrollers: micro-profile TFLite (static batch 1, TFLM builtin ops)",
        exports=(Export("tflite", (("profile", "micro"),), runtimes=("tflm",)),),
        methods={
            "ram": "the tensor arena: smallest arena (16-byte steps) TFLite Micro allocates and runs the file in, "
            "measured at export (metadata tflm.arena_bytes)"
        },
        not_measurable={
            "flash": "no target toolchain builds the TFLM interpreter here (the flatbuffer: --max-file-bytes)",
            "latency_us": "no microcontroller runs it here",
            "instructions": "the TFLM interpreter is not run on an emulated core",
        },
        parity="the verifier (LiteRT) and the file run in the tflm runtime, both against the NumPy reference",
    )
)
