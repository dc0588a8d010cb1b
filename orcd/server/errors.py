"""HTTP error bodies and the exception handlers that produce them.

Every error leaves the server in OpenAI's envelope: {"error": {"message", "type", "param", "code"}}.
User mistakes are 4xx with the offending field in `param`; only real server faults are 500.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from orcd.errors import ContextLengthExceededError, OrcdError, RequestError, TemplateError, TokenizerError
from orcd.server.text_checks import printable

log = logging.getLogger("orcd.server")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 413: "invalid_request_error", 503: "overloaded_error"}


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class APIError(Exception):
    """An HTTP error raised by route code; rendered in the OpenAI envelope."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}


MAX_MESSAGE = 300  # characters; messages may quote user values, which must not be echoed at length


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    err_type = _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    message = printable(" ".join(message.split()))  # a quoted user value may hold a lone surrogate
    param = None if param is None else printable(param)
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 1] + "…"
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


def context_overflow(ctx: int, n_prompt: int, requested: int | None, *, what: str = "prompt",
                     param: str | None = None, at_least: bool = False) -> ContextLengthExceededError:
    """OpenAI's wording, which clients match on (LiteLLM's context-window fallbacks look for "This model's
    maximum context length is"); code context_length_exceeded."""
    head = f"This model's maximum context length is {ctx} tokens. However, "
    if requested is None:
        n = f"at least {n_prompt}" if at_least else str(n_prompt)
        text = f"your {what} resulted in {n} tokens. Please reduce the length of the {what}."
    else:
        text = (f"you requested {n_prompt + requested} tokens ({n_prompt} in the {what}, {requested} in the "
                f"completion). Please reduce the length of the {what} or completion.")
    return ContextLengthExceededError(head + text, param=param)


def api_error_from(err: Exception) -> APIError:
    """Map an exception raised while preparing a request to the APIError users see."""
    if isinstance(err, APIError):
        return err
    if isinstance(err, RequestError):
        return APIError(400, str(err), param=err.param, code=err.code or "invalid_request")
    if isinstance(err, (TemplateError, TokenizerError)):
        return APIError(400, str(err), param="messages", code="invalid_request")
    if isinstance(err, OrcdError):
        return APIError(500, str(err), code="internal_error")
    log.exception("unexpected error", exc_info=err)
    return APIError(500, "internal server error", code="internal_error")


def _input_path(loc: tuple, body: Any, missing: bool) -> list[str]:
    """The parts of a pydantic error location that index into the request body. Union members add
    their type to the location (`prompt.str`): those are dropped, so `param` is a real field path."""
    parts, cur = [], body
    for i, p in enumerate(loc):
        if isinstance(cur, dict) and p in cur or isinstance(cur, list) and isinstance(p, int) \
                and 0 <= p < len(cur):
            parts.append(str(p))
            cur = cur[p]
        elif missing and i == len(loc) - 1:
            parts.append(str(p))
    return parts


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request body", None
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    loc = _input_path(loc[1:] if loc[:1] == ("body",) else loc, getattr(exc, "body", None),
                      first.get("type") in ("missing", "extra_forbidden"))
    if not loc and first.get("type") == "missing":
        return "the request body is missing: send a JSON object", None
    if not loc and first.get("type") in ("model_attributes_type", "dict_type"):
        return "the request body must be a JSON object", None
    if first.get("type") == "json_invalid":
        return f"request body is not valid JSON: {first.get('ctx', {}).get('error', 'parse error')}", None
    if first.get("type") == "extra_forbidden":
        return f"unrecognized request argument supplied: {'.'.join(loc)}", ".".join(loc) or None
    param = ".".join(loc) or None
    msg = str(first.get("msg", "invalid value")).replace("\n", " ")
    return (f"{param}: {msg}" if param else msg), param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.code, exc.headers)

    @app.exception_handler(OrcdError)
    async def _orcd_error(request: Request, exc: OrcdError) -> JSONResponse:
        err = api_error_from(exc)
        return error_response(err.status, err.message, err.param, err.code)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return error_response(400, message, param, "invalid_request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else "request failed"
        code = None
        if exc.status_code == 404:
            detail = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 400:  # FastAPI could not decode the body (bytes that are not UTF-8)
            detail, code = f"the request body is not valid JSON in UTF-8 ({detail})", "invalid_request"
        return error_response(exc.status_code, detail, None, code, getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path, exc_info=exc)
        return error_response(500, "internal server error", None, "internal_error")
