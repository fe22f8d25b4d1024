"""The ``aarch64`` deploy target: ONNX (onnxruntime) and TFLite (LiteRT) for an aarch64 Linux board.

Measured: ``file_bytes`` (the larger file), bits and ops. Not measured: latency - the aarch64 check
(:mod:`bnc_deploy.targets.aarch64`) runs the files under qemu-user, whose timings say nothing about
an aarch64 CPU - and memory. Parity: the verifier on the host; the aarch64 builds of the runtimes
are checked by ``bnc-target run --target aarch64`` (a cached arm64 root, root privileges), which
this measurement does not run.
"""

from __future__ import annotations

from bnc_deploy.targets.base import Export, Target, register_target

register_target(
    Target(
        name="aarch64",
        description="aarch64 Linux board: ONNX (onnxruntime) and TFLite (LiteRT)",
        exports=(Export("onnx"), Export("tflite")),
        not_measurable={
            "flash": "a Linux board has no flash budget (use --max-file-bytes)",
            "ram": "memory on the board is not measured",
            "latency_us": "aarch64 runs under qemu-user here: translated instructions, no meaningful time",
            "instructions": "instructions are counted on emulated Cortex-M targets only",
        },
        parity="the verifier on the host (bnc-target run --target aarch64 checks the aarch64 runtimes, not run here)",
    )
)
