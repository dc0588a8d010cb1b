"""The engine: sequences, scheduler, KV cache blocks, model runner, sampler."""
