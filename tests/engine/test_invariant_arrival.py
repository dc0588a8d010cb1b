"""Seeded requests give the same events (tokens and logprobs, bit for bit) whether they arrive together or
one per step: the batch-invariant path must not depend on which prompts share a prefill step (on the CPU
the GEMM's summation order follows the number of rows; that once made logprobs differ by 1e-7)."""

from __future__ import annotations

import dataclasses

from orcd.engine.core_process import EngineBuild
from orcd.engine.io import EngineRequest
from orcd.engine.sampling_params import SamplingParams
from orcd.hub import resolve_model_path

BUILD = EngineBuild(resolve_model_path(None), device="cpu", num_kv_blocks=128)


def _run(every: int) -> dict[str, list]:
    """Add the three requests all at once (every=0) or one each `every` steps; events by request."""
    sp = SamplingParams(max_tokens=6, temperature=0.8, ignore_eos=True, logprobs=2)
    pending = [EngineRequest(f"r{i}", [1, 2 + i, 3, 4 + i, 5], dataclasses.replace(sp, seed=i))
               for i in range(3)]
    eng, out, step = BUILD.build(), {}, 0
    while pending or eng.has_work():
        if pending and (every == 0 or step % every == 0):
            for req in pending if every == 0 else pending[:1]:
                eng.add_request(req)
            pending = [] if every == 0 else pending[1:]
        for ev in eng.step():
            out.setdefault(ev.request_id, []).append((ev.token_id, ev.logprobs))
        step += 1
    return out


def test_seeded_events_do_not_depend_on_arrival():
    together = _run(0)
    assert sorted(together) == ["r0", "r1", "r2"] and all(len(v) == 6 for v in together.values())
    assert _run(1) == together
    assert _run(2) == together
