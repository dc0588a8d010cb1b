"""The served models: GET /v1/models (every model, loaded or not, with its state), GET /v1/models/{id},
and loading / unloading them by hand, in llama.cpp router mode's shapes (GET /models, POST /models/load,
POST /models/unload with {"model": ...}) and as POST /v1/models/{id}/load and /unload."""

from __future__ import annotations

from fastapi import APIRouter, Request

from orcd.server.errors import ErrorBody
from orcd.server.model_pool import ModelPool, ModelSlot
from orcd.server.schemas import ModelAction, ModelActionResponse, ModelCard, ModelList

router = APIRouter()
_ERRORS = {s: {"model": ErrorBody} for s in (400, 401, 404, 500, 503)}
_ACTION = {"response_model": ModelActionResponse, "response_model_exclude_none": True, "responses": _ERRORS}


def _pool(request: Request) -> ModelPool:
    return request.app.state.pool


def _list(request: Request) -> dict:
    created = request.app.state.created
    return {"object": "list", "data": [s.card(created) for s in _pool(request).slots.values()]}


def _done(slot: ModelSlot) -> dict:
    return {"success": True, "model": slot.name, "status": {"value": slot.state}}


@router.get("/v1/models", response_model=ModelList, response_model_exclude_none=True,
            responses={401: {"model": ErrorBody}})
async def models(request: Request) -> dict:
    return _list(request)


@router.get("/models", response_model=ModelList, response_model_exclude_none=True,
            responses={401: {"model": ErrorBody}})
async def models_router_mode(request: Request) -> dict:
    """llama.cpp router mode's listing (the same body as /v1/models)."""
    return _list(request)


@router.post("/models/load", **_ACTION)
async def load(body: ModelAction, request: Request) -> dict:
    """Load a model (making room by unloading the least recently used one if needed); answers once loaded."""
    return _done(await _pool(request).load(body.model))


@router.post("/models/unload", **_ACTION)
async def unload(body: ModelAction, request: Request) -> dict:
    """Unload a model; with requests in flight, answers once they have finished and it is unloaded."""
    return _done(await _pool(request).unload(body.model))


@router.post("/v1/models/{model_id:path}/load", **_ACTION)
async def load_by_id(model_id: str, request: Request) -> dict:
    return _done(await _pool(request).load(model_id))


@router.post("/v1/models/{model_id:path}/unload", **_ACTION)
async def unload_by_id(model_id: str, request: Request) -> dict:
    return _done(await _pool(request).unload(model_id))


@router.get("/v1/models/{model_id:path}", response_model=ModelCard, response_model_exclude_none=True,
            responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}})
async def model(model_id: str, request: Request) -> dict:
    return _pool(request).slot(model_id).card(request.app.state.created)
