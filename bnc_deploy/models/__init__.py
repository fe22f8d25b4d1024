"""Torch models (training only) and numpy structure learning."""
