"""HTTP worker: FastAPI app around an AsyncEngine (orcd's SSE stream + OpenAI-compatible API)."""

from orcd.server.app import create_app
from orcd.server.settings import ServerSettings

__all__ = ["ServerSettings", "create_app"]
