"""Loading a GGUF file onto a device: weights, tokenizer and the CUDA warm-up, overlapped."""
