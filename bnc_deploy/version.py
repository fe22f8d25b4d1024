"""The toolkit's version: one constant, read by the root package and by every file writer that
records which version produced a file (a foundation, so that reading it imports nothing else)."""

__version__ = "0.1.0"
