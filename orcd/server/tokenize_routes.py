"""POST /tokenize and POST /detokenize (vLLM's shapes): the served model's tokenizer, exactly as the
generation routes use it, so a client can count a prompt's tokens before sending it."""

from __future__ import annotations

from anyio import to_thread
from fastapi import APIRouter, Request

from orcd.errors import RequestError
from orcd.server.errors import ErrorBody
from orcd.server.jobs import JobHub
from orcd.server.prep import chat_messages, encode_chat
from orcd.server.schemas import DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse

router = APIRouter()
_ERRORS = {s: {"model": ErrorBody} for s in (400, 401, 404, 413)}


@router.post("/tokenize", response_model=TokenizeResponse, responses=_ERRORS)
async def tokenize(body: TokenizeRequest, request: Request) -> dict:
    hub: JobHub = request.app.state.hub
    hub.pool.slot(body.model)
    if (body.prompt is None) == (body.messages is None):
        raise RequestError("send exactly one of prompt and messages", param="prompt")
    async with hub.pool.lease(body.model) as slot:
        tok, ctx = slot.engine.tokenizer, hub.context_length(slot)
        if body.messages is not None:
            ids = await encode_chat(tok, chat_messages(body.messages), ctx,
                                    add_generation_prompt=body.add_generation_prompt)
        elif body.add_special_tokens:
            ids = await to_thread.run_sync(tok.encode_prompt, body.prompt)
        else:
            ids = await to_thread.run_sync(tok.encode, body.prompt)
    return {"count": len(ids), "max_model_len": ctx, "tokens": ids}


@router.post("/detokenize", response_model=DetokenizeResponse, responses=_ERRORS)
async def detokenize(body: DetokenizeRequest, request: Request) -> dict:
    hub: JobHub = request.app.state.hub
    async with hub.pool.lease(body.model) as slot:
        vocab = int(slot.engine.config.vocab_size)
        bad = next((i for i, t in enumerate(body.tokens) if not 0 <= t < vocab), None)
        if bad is not None:
            raise RequestError(f"tokens.{bad}: token id {body.tokens[bad]} is outside the vocabulary "
                               f"(0..{vocab - 1})", param=f"tokens.{bad}")
        return {"prompt": await to_thread.run_sync(slot.engine.tokenizer.decode, body.tokens)}
