"""The ``android`` deploy target: ONNX Runtime Mobile's ORT format and TFLite with standard metadata.

Both files an Android app bundles: ``.ort`` (onnxruntime-android) and ``.tflite`` with the TFLite
standard metadata (``metadata=True``: the Android Studio ML binding and the Task Library read it).
Measured: ``file_bytes`` (the larger file: what the app ships at most), bits and ops. Not measured:
latency and memory on a phone (no device here; ``bnc-target run --target aarch64`` checks the
arithmetic on emulated aarch64, not its speed). Parity: the verifier (onnxruntime, LiteRT on the host).
"""

from __future__ import annotations

from bnc_deploy.targets.base import Export, Target, register_target

register_target(
    Target(
        name="android",
        description="Android app: ORT format (onnxruntime-android) and TFLite with standard metadata (LiteRT)",
        exports=(Export("ort"), Export("tflite", (("metadata", True),))),
        not_measurable={
            "flash": "an app has no flash budget (use --max-file-bytes)",
            "ram": "memory on the phone is not measured (no device here)",
            "latency_us": "no phone runs the files here",
            "instructions": "instructions are counted on emulated Cortex-M targets only",
        },
        parity="the verifier: the ORT file in onnxruntime and the TFLite file in LiteRT, on the host",
    )
)
