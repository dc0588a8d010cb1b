"""The batched mask (GrammarBackend.fill: pending tokens applied, then every row's mask in one
call) equals a plain llguidance matcher per request, advanced at once and masked alone, token by token."""

from __future__ import annotations

import random

import llguidance
import numpy as np
import pytest
import torch

from orcd.structured.grammars import json_schema_grammar, regex_grammar
from orcd.structured.mask import apply_mask, unpack_bitmask

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 3}},
    "required": ["name", "age", "tags"], "additionalProperties": False}


@pytest.fixture(scope="module")
def backend():
    from orcd.gguf import open_gguf
    from orcd.hub import DEMO_MODEL_PATH
    from orcd.structured.backend import GrammarBackend
    from orcd.tokenizer import load_tokenizer

    return GrammarBackend(load_tokenizer(open_gguf(DEMO_MODEL_PATH).metadata))


def reference_mask(b, m: llguidance.LLMatcher) -> torch.Tensor:
    """One matcher's bitmask [W] int32 computed alone; nothing allowed -> the EOS tokens (fill's rule)."""
    words = np.frombuffer(m.compute_bitmask(), dtype=np.int32).copy()
    if not words.any():
        for t in b.eos_ids:
            words[t // 32] |= np.int32(np.uint32(1 << (t % 32)).view(np.int32))
    return torch.from_numpy(words)


def test_batched_deferred_mask_equals_per_request_token_by_token(backend):
    """8 requests (a schema, a regex) walk at random among their allowed tokens, now and then a forbidden
    one (error state) or tokens past the end; sometimes two tokens pend before a fill, sometimes a row
    skips a step. Every fill equals the per-request masks."""
    rng = random.Random(0)
    grammars = [json_schema_grammar(SCHEMA, "s"), regex_grammar("(ab|c)+d", "r")]
    ours = [backend.matcher(grammars[i % 2]) for i in range(8)]
    refs = [llguidance.LLMatcher(backend.lltok, grammars[i % 2], log_level=0) for i in range(8)]
    for _ in range(40):
        rows = [i for i in range(8) if rng.random() < 0.85]
        bitmask = backend.fill([ours[i] for i in rows])
        for j, i in enumerate(rows):
            assert torch.equal(bitmask[j], reference_mask(backend, refs[i])), (i, j)
        allowed = unpack_bitmask(bitmask, backend.vocab_size)
        for j, i in enumerate(rows):
            n = 2 if rng.random() < 0.2 else 1
            for _ in range(n):
                ok = allowed[j].nonzero().flatten().tolist()
                t = rng.randrange(backend.vocab_size) if rng.random() < 0.03 else rng.choice(ok)
                ours[i].consume(t)
                if not refs[i].is_stopped():
                    refs[i].consume_token(t)
    assert any(r.is_error() for r in refs) and any(not r.is_error() for r in refs)
    assert [m.done for m in ours] == [r.is_stopped() or r.is_error() for r in refs]


def test_consume_is_applied_before_any_read(backend):
    m = backend.matcher(regex_grammar("ab", "r"))
    for t in backend.tokenizer.encode("ab"):
        m.consume(t)
    assert m.pending and m.m.is_accepting() and not m.pending


def test_pinned_fill_uploads_the_same_mask(backend):
    """fill(pin=True) (CUDA only) and apply_mask from pinned memory give the mask fill() gives."""
    if not torch.cuda.is_available():
        pytest.skip("pinned memory needs CUDA")
    ms = [backend.matcher(json_schema_grammar(SCHEMA, "s")) for _ in range(3)]
    plain, pinned = backend.fill(ms), backend.fill(ms, pin=True)
    assert pinned.is_pinned() and torch.equal(plain, pinned)
    logits = torch.randn(5, backend.vocab_size, device="cuda")
    got = apply_mask(logits, [0, 2, 4], pinned)
    want = apply_mask(logits.cpu(), [0, 2, 4], plain)
    assert torch.equal(got.cpu(), want)
