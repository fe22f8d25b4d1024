"""Export helpers for the tests: every file goes through the one verifier (bnc_deploy.verify)."""

from __future__ import annotations

from bnc_deploy.verify import export_path


def export_onnx(artifact, path, **options):
    """Build, verify and publish an ONNX export; the published path."""
    return export_path(artifact, path, "onnx", **options)


def export_tflite(artifact, path, **options):
    """Build, verify and publish a TFLite export; the published path."""
    return export_path(artifact, path, "tflite", **options)
