"""Options that several BN exporters declare, declared once so the flags read the same everywhere.

A private helper module (the leading underscore keeps the exporter registry from importing it as
an exporter).
"""

from __future__ import annotations

from bnc_deploy.exporters.base import Option
from bnc_deploy.formats.bnc import LOWERINGS

LOWERING = Option("lowering", "str", "gather", LOWERINGS,
                  "table lookup as an integer gather (default, exact) or one-hot times table (FC layer)")
RAW_INPUTS = Option("raw_inputs", "bool", False,
                    help="embed the model's discretizer: the file takes raw float32 feature values")
