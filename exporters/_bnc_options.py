"""Options that several BN exporters declare, declared once so the flags read the same everywhere.

A private helper module (the leading underscore keeps the exporter registry from importing it as
an exporter). ``ONNX_LOWERING`` is the same ``--lowering`` flag with the ONNX-only choices added
(``gather-grouped``): the CLI merges the choices of every exporter, and an exporter that does not
offer a lowering refuses it by name (``formats.bnc.check_lowering`` against its own list).
"""

from __future__ import annotations

from bnc_deploy.exporters.base import Option

from bnc_deploy.formats.bnc import LOWERINGS, ONNX_LOWERINGS

LOWERING = Option("lowering", "str", "gather", LOWERINGS,
                  "table lookup as an integer gather (default, exact) or one-hot times table (FC layer)")
ONNX_LOWERING = Option("lowering", "str", "gather", ONNX_LOWERINGS,
                       "table lookup as an integer gather (default, exact; fastest per row), one-hot times "
                       "table (FC layer), or gather-grouped (ONNX only, exact: merged feature groups, fewer "
                       "lookups, fastest on large batches, more table memory at load time)")
RAW_INPUTS = Option("raw_inputs", "bool", False,
                    help="embed the model's discretizer: the file takes raw float32 feature values")
