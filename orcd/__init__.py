"""orcd: a Python GGUF inference worker."""

__version__ = "0.1.0"
