"""Which part of the CPU batch-invariant engine depends on arrival on this host: run test_invariant_arrival's
_run(0) / _run(1) / _run(2) under variants and print where events differ."""
import os
import sys

sys.path.insert(0, "tests/engine")
import test_invariant_arrival as t  # noqa: E402
import torch  # noqa: E402

from orcd.quant import linear  # noqa: E402

variant = sys.argv[1]
if variant == "threads1":
    torch.set_num_threads(1)
if variant == "linear1":
    import torch.nn.functional as F
    orig_lin = F.linear

    def one_thread_linear(*a, **k):
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return orig_lin(*a, **k)
        finally:
            torch.set_num_threads(n)
    linear.F.linear = one_thread_linear
if variant == "clone":
    orig = linear.QuantLinear._invariant_cpu

    def _inv(self, x2):
        return orig(self, x2.clone())
    linear.QuantLinear._invariant_cpu = _inv


def first_diff(a, b):
    for rid in sorted(a):
        for j, (ea, eb) in enumerate(zip(a[rid], b[rid], strict=False)):
            if ea != eb:
                return rid, j, ea, eb
    return None


base = t._run(0)
res = []
for every in (1, 2):
    d = first_diff(base, t._run(every))
    res.append(f"every={every} " + ("same" if d is None else f"DIFF {str(d)[:80]}"))
print("RESULT", variant, os.environ.get("MKL_CBWR", "-"), os.environ.get("MKL_DYNAMIC", "-"), *res)
