"""Moved: the Edge TPU report is a target check, now :mod:`bnc_deploy.targets.edgetpu`.

``python -m bnc_deploy.exporters.edgetpu_report FILE.tflite`` keeps working (it was documented)
and says where the report lives now. This module registers no exporter.
"""

from __future__ import annotations

import sys

from bnc_deploy.targets.edgetpu import edgetpu_compatibility, format_report, main  # noqa: F401  (old import path)

if __name__ == "__main__":
    print("note: the Edge TPU report moved to `python -m bnc_deploy.targets.edgetpu`", file=sys.stderr)
    sys.exit(main())
