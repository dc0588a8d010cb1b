"""Run under TRITON_INTERPRET=1 (by test_gemv_int8.py): the int8-activation Q4_K kernels on the CPU.

Prints one line per check: `name error tolerance`. Odd shapes only (small, fast): M = 1, 2, 3, 8
(NT = 1, 2, 4, 8 tokens per program), M = 5 at NT 2 and M = 9 at NT 8 (a last program with fewer
tokens); K = 768 (12 chunks: the last pass of G = 16 is partial; NT 8's G 8 and Q6_K's G 2..8: partial
or whole), out not a multiple of BO; K split in 2, 3 and 4 (launch's fifth entry: 4 splits of 6 passes
leave the last one empty).
"""

from __future__ import annotations

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, os.path.dirname(__file__))

from gguf import GGMLQuantizationType as T  # noqa: E402
from int8_cases import gemv3_cases, gemv_cases, glu_cases, quant_cases  # noqa: E402

if __name__ == "__main__":
    cases = [*quant_cases("cpu", [96, 1056], [3]), *gemv_cases("cpu", [(37, 768)], [1, 3, 8]),
             *gemv_cases("cpu", [(37, 768)], [5], launch=(16, 4, 4, 2)),
             *gemv_cases("cpu", [(21, 768)], [3, 8], qt=T.Q6_K),
             *gemv_cases("cpu", [(21, 768)], [9], qt=T.Q6_K, launch=(2, 8, 4, 8)),
             *gemv_cases("cpu", [(37, 768)], [1], launch=(2, 4, 4, 1, 3)),
             *gemv_cases("cpu", [(37, 768)], [3], launch=(2, 4, 4, 4, 4)),
             *gemv_cases("cpu", [(21, 768)], [1], qt=T.Q6_K, launch=(2, 8, 4, 1, 2)),
             *glu_cases("cpu", [(64, 512)], [1]), *glu_cases("cpu", [(64, 512)], [5], nt=2),
             *gemv3_cases("cpu", [40, 8, 8], 512, [T.Q4_K, T.Q4_K, T.Q6_K], [2, 5])]
    for name, err, tol in cases:
        print(name, f"{err:.3e}", tol, flush=True)
