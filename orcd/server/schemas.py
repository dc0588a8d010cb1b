"""Request and response bodies (pydantic). Unknown request fields are rejected (400 naming them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RequestId = Field(default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:\-]+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SamplingFields(_Strict):
    """Sampling knobs shared by every generation route; ranges are checked by SamplingParams.validate."""

    temperature: float | None = Field(default=None, description="0 = greedy; default 1.0")
    top_k: int | None = Field(default=None, description="0 = off (orcd extension on OpenAI routes)")
    top_p: float | None = Field(default=None, description="1 = off")
    min_p: float | None = Field(default=None, description="0 = off (orcd extension on OpenAI routes)")
    repetition_penalty: float | None = Field(default=None, description="1 = off")
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = Field(default=None, description="same seed + same input -> same output")
    stop: str | list[str] | None = Field(default=None, description="stop strings (not returned)")
    ignore_eos: bool = Field(default=False, description="keep generating past end-of-generation tokens")


class GenerateRequest(SamplingFields):
    prompt: str
    max_tokens: int | None = Field(default=None, description="default 256, capped by the context")
    chat: bool = Field(default=False, description="wrap the prompt with the model's chat template")
    stream: bool = True
    request_id: str | None = RequestId
    model: str | None = Field(default=None, description="if given, must name the served model")


class GenerateResponse(BaseModel):
    request_id: str
    model: str
    text: str
    token_ids: list[int]
    prompt_tokens: int
    tokens_out: int
    stop_reason: Literal["eos", "stop", "length", "cancelled", "error"]
    ttft_ms: float | None
    tokens_per_s: float | None


class CancelRequest(_Strict):
    request_id: str = Field(min_length=1, max_length=128)


class CancelResponse(BaseModel):
    request_id: str
    cancelled: bool


class StreamOptions(_Strict):
    include_usage: bool = False


class _OpenAIFields(SamplingFields):
    model: str
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = Field(default=None, max_length=256, description="accepted; recorded nowhere")


class CompletionRequest(_OpenAIFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=16, description="OpenAI default 16; null = up to the context")
    echo: bool = False
    logprobs: int | None = None
    best_of: int | None = None
    suffix: str | None = None


class ContentPart(_Strict):
    type: str
    text: str | None = None
    image_url: Any = None


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[Any] | None = None
    tool_call_id: str | None = None
    function_call: Any = None
    refusal: str | None = None
    audio: Any = None


class ChatCompletionRequest(_OpenAIFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    functions: list[Any] | None = None
    function_call: Any = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: str | None
    logprobs: None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: str | None
    logprobs: None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "orcd"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok", "loading", "draining"]
    model: str | None
    architecture: str | None
    device: str | None
    weights_bytes: int | None
    kv_cache_bytes: int | None
    kv_capacity_tokens: int | None
    kv_blocks_total: int | None
    kv_blocks_used: int | None
    running: int | None
    waiting: int | None
    active_requests: int
    device_memory: dict[str, int] | None = Field(default=None, description="as the device reports it")
