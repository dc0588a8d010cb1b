"""orcd: a Python GGUF inference worker."""

import os as _os

__version__ = "0.1.0"

# Intel MKL (torch's CPU BLAS on x86) in its strict reproducible mode unless MKL_CBWR is set already:
# on an AVX-512 Xeon its threaded GEMM summed in an order that changed from call to call, so the CPU's
# batch-invariant step gave seeded logprobs 1e-7 apart by arrival (session 37, bench/results/s37/
# cpu_invariance). MKL reads the variable at its first call: importing orcd before any CPU matmul is enough.
_os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
