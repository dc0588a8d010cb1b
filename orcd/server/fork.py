"""n > 1: the choices of one request as n engine requests that share one prefill.

The first choice starts at once. The others wait until its first events arrive -- its prompt is then
prefilled and every full KV block of it registered in the prefix cache -- and start then, each finding
the prompt's blocks there (only the last, partial block is computed again). Each choice has its own
seed stream: choice 0 the request's seed (so n=1 and choice 0 of n>1 agree), choice i a seed derived
from it; without a seed every choice samples at random.
"""

from __future__ import annotations

import asyncio
import dataclasses

from orcd.engine.io import EngineRequest, TokenEvent
from orcd.engine.sampling_params import SamplingParams
from orcd.errors import RequestError
from orcd.server.jobs import Job, JobHub
from orcd.server.model_pool import ModelSlot

_SEED_STEP = 0x9E3779B97F4A7C15  # golden-ratio stride: forks' seeds far apart in the 63-bit space
MAX_N = 16  # choices one request may ask for


def fork_seed(seed: int | None, index: int) -> int | None:
    return None if seed is None else (seed + index * _SEED_STEP) % (1 << 63)


class DeferredStream:
    """The event iterator of a fork: engine.generate() once `gate` opens (never, if cancelled before)."""

    def __init__(self, hub: JobHub, job: Job, gate: asyncio.Event):
        self.hub, self.job, self.gate = hub, job, gate
        self.inner = None

    def __aiter__(self) -> DeferredStream:
        return self

    async def __anext__(self) -> TokenEvent:
        if self.inner is None:
            await self.gate.wait()
            if self.job.cancel_requested:
                raise StopAsyncIteration  # JobHub turns this into a `cancelled` final event
            job = self.job
            self.inner = aiter(job.slot.engine.generate(EngineRequest(job.request_id, job.prompt_ids,
                                                                      job.sampling)))
        return await anext(self.inner)

    def ready(self) -> list[TokenEvent]:
        ready = getattr(self.inner, "ready", None)
        return ready() if ready is not None else []

    async def aclose(self) -> None:
        aclose = getattr(self.inner, "aclose", None)
        if aclose is not None:
            await aclose()


def admit_choices(hub: JobHub, slot: ModelSlot, route: str, prompt_ids: list[int], sampling: SamplingParams,
                  n: int, prefix: str) -> list[Job]:
    """n Jobs for one request on one model (all admitted, or none: the queue must hold them all)."""
    room = hub.capacity(slot)
    if n > room:  # would never fit: a 400, not a 503 a client would retry forever
        raise RequestError(f"n={n} is more than this server runs and queues at once ({room})", param="n")
    first = hub.admit(slot, route, prompt_ids, sampling, prefix=prefix, reserve=n)
    if n == 1:
        return [first]
    first.opens = asyncio.Event()
    jobs = [first]
    try:
        for i in range(1, n):
            params = dataclasses.replace(sampling, seed=fork_seed(sampling.seed, i))
            jobs.append(hub.admit(slot, route, prompt_ids, params, f"{first.request_id}.{i}", reserve=n - i,
                                  stream=lambda job: DeferredStream(hub, job, first.opens)))
            jobs[-1].parent = first.request_id
    except BaseException:
        for job in jobs:
            hub.cancel(job.request_id)
            hub.release(job)
        raise
    return jobs
