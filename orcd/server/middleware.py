"""Pure-ASGI middleware: API-key check and request body size limit (both before any route code)."""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orcd.server.anthropic_format import error_body as anthropic_error
from orcd.server.errors import error_body

OPEN_PATHS = frozenset({"/health"})


async def _send_error(send: Send, status: int, message: str, code: str, headers: dict | None = None,
                      path: str = "") -> None:
    """The OpenAI envelope, or Anthropic's error shape on its routes (/v1/messages...)."""
    anthropic = path.startswith("/v1/messages")
    body = json.dumps(anthropic_error(status, message) if anthropic else error_body(status, message, None,
                                                                                   code)).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value
    return None


# Bodies sent without a content type, or as curl's default form encoding, are read as JSON: every POST
# route takes JSON, and `curl -d '{...}'` is how people try a server first.
_JSON_BY_DEFAULT = (None, b"application/x-www-form-urlencoded")


def _json_by_default(scope: Scope) -> Scope:
    if _header(scope, b"content-type") not in _JSON_BY_DEFAULT:
        return scope
    headers = [(k, v) for k, v in scope.get("headers", ()) if k != b"content-type"]
    return {**scope, "headers": [*headers, (b"content-type", b"application/json")]}


class APIKeyMiddleware:
    """Every route but /health needs `Authorization: Bearer KEY` or `x-api-key: KEY`.
    Compared in constant time; the key is never logged or echoed."""

    def __init__(self, app: ASGIApp, api_key: str):
        self.app = app
        self._key = api_key.encode()

    def _authorized(self, scope: Scope) -> bool:
        given = _header(scope, b"x-api-key")
        auth = _header(scope, b"authorization")
        if given is None and auth is not None and auth[:7].lower() == b"bearer ":
            given = auth[7:].strip()
        return given is not None and hmac.compare_digest(given, self._key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        await _send_error(send, 401, "missing or invalid API key", "invalid_api_key",
                          {"WWW-Authenticate": "Bearer"}, scope["path"])


class BodyLimitMiddleware:
    """Refuse bodies over `limit` bytes with 413: at once from Content-Length, else while reading
    (the body is buffered up to the limit, then replayed to the app)."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        too_big = f"request body exceeds {self.limit} bytes"
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _send_error(send, 413, too_big, "request_too_large", path=scope["path"])
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # client went away before sending its body
            size += len(message.get("body", b""))
            if size > self.limit:
                await _send_error(send, 413, too_big, "request_too_large", path=scope["path"])
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        replayed = False
        scope = _json_by_default(scope)

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
