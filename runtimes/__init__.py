"""Runtime adapters: run an exported file (NumPy reference, onnxruntime, LiteRT).

Installed as ``bnc_deploy.runtimes``. Runtimes read exported files only.
"""
