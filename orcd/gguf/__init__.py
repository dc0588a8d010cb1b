"""Reading GGUF files: safe header checks, metadata -> one frozen ModelConfig, validation."""

from orcd.gguf.reader import GGUFFile, GGUFTensor, open_gguf

__all__ = ["GGUFFile", "GGUFTensor", "open_gguf"]
