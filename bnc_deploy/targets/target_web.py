"""The ``web`` deploy target: a page that runs the model in the browser (``samples/web``).

Two files, as the web sample loads them: the web-profile TFLite (``profile="web"``: int32 label,
the ops LiteRT.js runs) and the ONNX export (onnxruntime-web). Measured: ``file_bytes`` (the larger
of the two, what the page downloads at most), and the analytic bits and ops. No latency: no
browser runs here. Parity: the verifier, with LiteRT and onnxruntime on the host; the browser
builds of those runtimes are not run (``tests/test_web_runtimes.py`` checks the sample page).
"""

from __future__ import annotations

from bnc_deploy.targets.base import Export, Target, register_target

register_target(
    Target(
        name="web",
        description="browser: web-profile TFLite (LiteRT.js) and ONNX (onnxruntime-web)",
        exports=(Export("tflite", (("profile", "web"),)), Export("onnx")),
        not_measurable={
            "flash": "a browser has no flash budget (use --max-file-bytes: the download)",
            "ram": "the browser runtimes' memory is not measured",
            "latency_us": "no browser runs the files here",
            "instructions": "instructions are counted on emulated Cortex-M targets only",
        },
        parity="the verifier: the TFLite file in LiteRT and the ONNX file in onnxruntime, on the host",
    )
)
