"""The exported-file contract, apart from the converters that write it (TFLite's own split).

* :mod:`~bnc_deploy.formats.metadata`: names, guard and the metadata blob every export carries;
* :mod:`~bnc_deploy.formats.bnc`, :mod:`~bnc_deploy.formats.dnn`: each model kind's metadata
  builder and checker (registered with ``metadata.register_kind``), plus the BN index and
  raw-input rules;
* :mod:`~bnc_deploy.formats.onnx`, :mod:`~bnc_deploy.formats.tflite`: reading (and, for TFLite,
  finishing) files of each format without the exporters.

Exporters write through these modules; runtimes, the profiler, servers and targets read through
them, so no reader imports an exporter. Importing this package registers every kind's checker.
"""

from bnc_deploy.formats import bnc, dnn, metadata  # noqa: F401  (registers the kinds' checkers)
