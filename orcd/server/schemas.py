"""Request and response bodies (pydantic). Unknown request fields are rejected (400 naming them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, StrictBool, StrictInt, StrictStr, model_validator

from orcd.server.text_checks import check_no_surrogates

RequestId = Field(default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:\-]+$")
# JSON types are strict, as OpenAI's are: `true` is not 1, "5" is not 5, "no" is not false.
# A float field takes an integer (temperature=1), as OpenAI does.
Int, Bool, Str = StrictInt, StrictBool, StrictStr
Float = Annotated[float, Strict()]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Body(_Strict):
    """A whole request body: a lone UTF-16 surrogate anywhere in it is a 400 naming where."""

    @model_validator(mode="before")
    @classmethod
    def _no_surrogates(cls, data: Any) -> Any:
        check_no_surrogates(data)
        return data


class SamplingFields(_Body):
    """Sampling knobs shared by every generation route; ranges are checked by SamplingParams.validate."""

    temperature: Float | None = Field(default=None, description="0 = greedy; default 1.0")
    top_k: Int | None = Field(default=None, description="0 = off (orcd extension on OpenAI routes)")
    top_p: Float | None = Field(default=None, description="1 = off")
    min_p: Float | None = Field(default=None, description="0 = off (orcd extension on OpenAI routes)")
    repetition_penalty: Float | None = Field(default=None, description="1 = off")
    presence_penalty: Float | None = None
    frequency_penalty: Float | None = None
    seed: Int | None = Field(default=None, description="same seed + same input -> same output")
    stop: Str | list[Str] | None = Field(default=None, description="stop strings (not returned)")
    ignore_eos: Bool = Field(default=False, description="keep generating past end-of-generation tokens")


class GenerateRequest(SamplingFields):
    prompt: Str
    max_tokens: Int | None = Field(default=None, description="default 256, capped by the context")
    chat: Bool = Field(default=False, description="wrap the prompt with the model's chat template")
    stream: Bool = True
    request_id: Str | None = RequestId
    model: Str | None = Field(default=None, description="if given, must name the served model")


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


class CancelRequest(_Body):
    request_id: Str = Field(min_length=1, max_length=128)


class CancelResponse(BaseModel):
    request_id: str
    cancelled: bool


class StreamOptions(_Strict):
    include_usage: Bool = False


class _OpenAIFields(SamplingFields):
    model: Str
    n: Int = 1
    stream: Bool = False
    stream_options: StreamOptions | None = None
    logit_bias: dict[str, Float] | None = None
    user: Str | None = Field(default=None, max_length=256, description="accepted; recorded nowhere")


class CompletionRequest(_OpenAIFields):
    prompt: Str | list[Str] | list[Int] | list[list[Int]]
    max_tokens: Int | None = Field(default=16, description="OpenAI default 16; null = up to the context")
    echo: Bool = False
    logprobs: Int | None = None
    best_of: Int | None = None
    suffix: Str | None = None
    response_format: dict[str, Any] | None = None  # as chat's (structured output), vLLM-style


class ContentPart(_Strict):
    type: Str
    text: Str | None = None
    image_url: Any = None


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Str | list[ContentPart] | None = None
    name: Str | None = None
    tool_calls: list[Any] | None = None
    tool_call_id: Str | None = None
    function_call: Any = None
    refusal: Str | None = None
    audio: Any = None
    reasoning_content: Str | None = Field(default=None, description="an assistant turn's reasoning, as "
                                          "orcd returned it: given to the template (Qwen3, gpt-oss)")


class ChatCompletionRequest(_OpenAIFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Int | None = None
    max_completion_tokens: Int | None = None
    logprobs: Bool | None = None
    top_logprobs: Int | None = None
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: Bool | None = None
    functions: list[Any] | None = None
    function_call: Any = None
    chat_template_kwargs: dict[str, Any] | None = Field(default=None, description="extra chat template "
                                                        "variables, e.g. {\"enable_thinking\": false}")
    reasoning_effort: Str | None = Field(default=None, description="the chat template's reasoning_effort "
                                         "variable (gpt-oss: low, medium, high)")
    store: Bool | None = Field(default=None, description="false or absent: orcd keeps no completions")
    metadata: dict[str, Str] | None = Field(default=None, description="accepted; for stored completions, "
                                            "which orcd keeps none of")
    modalities: list[Literal["text"]] | None = Field(default=None, description="text only")
    verbosity: Literal["low", "medium", "high"] | None = Field(default=None, description="accepted; no "
                                                               "verbosity control")
    safety_identifier: Str | None = Field(default=None, description="accepted; recorded nowhere")
    prompt_cache_key: Str | None = Field(default=None, description="accepted; prefix caching is automatic")
    prompt_cache_retention: Str | None = Field(default=None, description="accepted; prefix caching is "
                                               "automatic")
    service_tier: Str | None = Field(default=None, description="accepted; orcd has one tier")


class TokenizeRequest(_Body):
    """vLLM's shape: a `prompt`, or chat `messages` rendered with the model's template."""

    model: Str | None = None
    prompt: Str | None = None
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)
    add_generation_prompt: Bool = Field(default=True, description="messages: end with the assistant turn")
    add_special_tokens: Bool = Field(default=True, description="prompt: BOS as the model file says")


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeRequest(_Body):
    model: Str | None = None
    tokens: list[Int]


class DetokenizeResponse(BaseModel):
    prompt: str


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: str | None
    logprobs: dict[str, Any] | None = None


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
    reasoning_content: str | None = Field(default=None, description="reasoning models only: their thinking")


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: str | None
    logprobs: dict[str, Any] | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ModelStatus(BaseModel):
    """llama.cpp router mode's status object."""

    value: Literal["unloaded", "loading", "loaded", "unloading"]
    failed: bool | None = Field(default=None, description="the last load failed (then `error` says why)")
    error: str | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "orcd"
    path: str | None = None
    status: ModelStatus | None = None
    active_requests: int | None = None


class ModelAction(_Body):
    """POST /models/load and /models/unload (llama.cpp router mode's shape)."""

    model: Str


class ModelActionResponse(BaseModel):
    success: bool
    model: str
    status: ModelStatus


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok", "loading", "draining", "error"]
    error: str | None = Field(default=None, description="with status error: why (the engine process exited)")
    pid: int | None = Field(default=None, description="the API process that answered (--api-processes)")
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
    models: list[dict[str, Any]] | None = Field(default=None, description="per model: id, status, "
                                                "active_requests, weights_bytes, kv_cache_bytes, kv_blocks_*")
