"""Exporters: model artifact -> deployable file (ONNX, TFLite).

Installed as ``bnc_deploy.exporters``. Exporters read artifacts only; they never import torch.
"""
