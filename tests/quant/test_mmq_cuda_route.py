"""mmq_cuda's route (ROUTED, uses_wide, default_launch) against the measurements it was set from (each 7B
product on the route before, the variant whose warps split K, and WIDE launches): at 9 rows the H100's of
session 20 (bench/results/mmq_cuda_s20/call3_kernels_1baf979.json; on the H200 of session 21 the LM head's
K split won there, 192.8 against 209.7 us, the H100 had WIDE ahead, 198.0 against 213.4), at 16, 32 and 64
rows the H200's after WIDE's x copy went to two stages (bench/results/mmq_cuda_s21/: 16 and 32 rows from
call 3, 64 from call 2, both of commit 87c4515's kernels), and at 32 and 64 rows a tensor-parallel
rank's halves of the same products (TP 2, H200, session 22: bench/results/mmq_cuda_s22/, the same
kernels' source; bench/kernels/mmq_cuda.py --tp 2). The kernel the route picks is the fastest
measured, within 5 %. Runs on the CPU (only the routing's arithmetic and the committed
JSON); a new measurement that moves a choice is committed beside a route that follows it."""

from __future__ import annotations

import json
from pathlib import Path

from gguf import GGMLQuantizationType as Q

from orcd.quant.kernels.mmq_cuda import ROUTED, default_launch

RESULTS = Path(__file__).resolve().parents[2] / "bench/results"
MEASURED = {"mmq_cuda_s20/call3_kernels_1baf979.json": (9,),  # file -> the rows taken from it
            "mmq_cuda_s21/call3_kernels_87c4515.json": (16, 32),
            "mmq_cuda_s21/call2_kernels_87c4515.json": (64,),
            "mmq_cuda_s22/tp2_kernels_91a31d5.json": (32, 64)}
# v (Q6_K) at 64 rows: splitting K 8.8 us against WIDE's 8.0 (TP 2: 8.3 against 7.8), left as is: the
# decode step runs q/k/v in one batched_qkv launch, never through this route
NOT_ON_THE_STEP = {("v 512x3584 Q6_K", 64), ("v 256x3584 (TP 2) Q6_K", 64)}


def chosen_kernel(product: str, m: int) -> str:
    """The bench's label of the kernel the route takes for `product` ("name NxK [(TP n)] TYPE") at m rows."""
    qt = Q[product.split()[-1]]
    n, k = (int(v) for v in product.split()[1].split("x"))
    if m > ROUTED.get((qt, qt == Q.Q6_K), 0):  # Q6_K: the split layout (the engine's default on CUDA)
        return "today"
    launch = default_launch(k, m, n)
    return "wide {}x{}x{}".format(*launch) if len(launch) == 3 else "cuda {}x{}".format(*launch)


def test_the_route_takes_the_fastest_measured_kernel():
    times: dict[tuple[str, int], dict[str, float]] = {}
    for name, ms in MEASURED.items():
        for row in json.loads((RESULTS / name).read_text())["rows"]:
            if row["m"] in ms:
                times.setdefault((row["product"], row["m"]), {})[row["kernel"]] = row["us"]
    assert len(times) == 28 + 16
    slower = {}
    for (product, m), kernels in times.items():
        pick = chosen_kernel(product, m)
        assert pick in kernels, f"{product} at {m} rows: the route's {pick!r} was not measured"
        if kernels[pick] > 1.05 * min(kernels.values()) and (product, m) not in NOT_ON_THE_STEP:
            slower[(product, m)] = (pick, kernels)
    assert not slower, slower
