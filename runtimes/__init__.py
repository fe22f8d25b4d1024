"""Runtime adapters: run an exported file, one adapter per runtime, registered by name in
:data:`bnc_deploy.runtimes.base.RUNTIMES` (loaded lazily, so choosing one never imports another's
framework): ``numpy`` (the reference, ``.bnc``), ``onnxruntime`` (``.onnx``, ``.ort``), ``litert``
(``.tflite``), ``tflm`` (micro-profile ``.tflite``), ``native`` (``.h``, compiled by the host C
compiler) and ``http`` (a model served by ``bnc-serve``). :mod:`~bnc_deploy.runtimes.base` holds
the interface and ``load_runtime``.

Installed as ``bnc_deploy.runtimes``. Runtimes read exported files only.
"""
