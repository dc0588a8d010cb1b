"""One served model of a ModelPool (orcd/server/model_pool.py): its name and file, its state
(unloaded, loading, loaded, unloading), and while loaded its engine (AsyncEngine or ProcessEngine); the
warm-up generation each engine runs before its first request, and what a failed load tells the client."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from orcd.engine.io import EngineRequest
from orcd.engine.sampling_params import SamplingParams
from orcd.server.errors import APIError
from orcd.server.logprobs_format import TokenNames

log = logging.getLogger("orcd.server")

UNLOADED, LOADING, LOADED, UNLOADING = "unloaded", "loading", "loaded", "unloading"


@dataclass(frozen=True)
class ModelSpec:
    name: str  # the id clients send in `model`
    path: Path | None  # None: an engine built by the caller (single-model mode)


class ModelSlot:
    """One served model: its state and, while loaded, its engine."""

    def __init__(self, spec: ModelSpec, engine=None):
        self.spec, self.name = spec, spec.name
        self.engine = engine
        self.state = LOADED if engine is not None else UNLOADED
        self.pinned = engine is not None  # single-model mode: loaded before the port, never unloaded
        self.token_names = TokenNames(engine.tokenizer) if engine is not None else None
        self.pins = 0  # route leases + admitted jobs; > 0 means requests in flight
        self.jobs = 0  # admitted jobs (the queue limit counts these)
        self.waiting = 0  # requests inside ModelPool.acquire for this slot
        self.draining = False  # chosen to be unloaded once its pins reach 0
        self.drain_reason = ""  # lru | idle | request
        self.last_used = time.monotonic()
        self.load_task: asyncio.Task | None = None
        self.error: str | None = None  # why the last load failed
        self.load_seconds: float | None = None

    def attach(self, engine) -> None:
        """A loaded engine: its tokenizer's token names (logprobs) are cached per model."""
        self.engine, self.token_names = engine, TokenNames(engine.tokenizer)

    def stats(self) -> dict:
        if self.engine is None:
            return {}
        try:
            return dict(self.engine.stats())
        except Exception:  # a scrape must never fail because the engine is busy or gone
            log.exception("engine.stats() of %s failed", self.name)
            return {}

    def card(self, created: int) -> dict:
        """OpenAI's model card plus llama.cpp router mode's `status` object."""
        status: dict = {"value": self.state}
        if self.state == UNLOADED and self.error:
            status.update(failed=True, error=self.error)
        return {"id": self.name, "object": "model", "created": created, "owned_by": "orcd",
                "path": None if self.spec.path is None else str(self.spec.path), "status": status,
                "active_requests": self.jobs}


async def warmup(engine) -> None:
    """One greedy token through the whole path, so the first user request pays no first-call costs."""
    tok = getattr(engine.tokenizer, "bos_id", None)
    req = EngineRequest("orcd-warmup", [tok if tok is not None else 0], SamplingParams(max_tokens=1,
                                                                                      temperature=0.0))
    async for ev in engine.generate(req):
        if ev.finished:
            break


def free_device_memory(device) -> None:
    gc.collect()
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def load_error(name: str, err: BaseException, retry_after: int) -> APIError:
    text = (str(err).splitlines() or [type(err).__name__])[0]
    if "out of memory" in text.lower():
        return APIError(503, f"model {name!r} does not fit in device memory now: {text}",
                        code="insufficient_memory", param="model", headers={"Retry-After": str(retry_after)})
    return APIError(500, f"model {name!r} could not be loaded: {text}", code="model_load_failed",
                    param="model")
