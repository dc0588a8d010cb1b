"""Execution of one scheduled step: inputs, the model forward (eager or CUDA graphs), sampling."""
