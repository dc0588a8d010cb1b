"""Turn request bodies into prompt token ids and SamplingParams (shared by /v1/generate and OpenAI)."""

from __future__ import annotations

from collections.abc import Callable

from anyio import to_thread

from orcd.engine.sampling_params import SamplingParams
from orcd.errors import ContextLengthExceededError, RequestError
from orcd.server.errors import context_overflow
from orcd.server.reasoning import turn_reasoning
from orcd.server.schemas import ChatMessage, SamplingFields
from orcd.server.tools import history_message, template_call_ids
from orcd.tokenizer.chat import MAX_OUTPUT_CHARS

_DEFAULTS = SamplingParams()

# Prompts of at most this many characters are tokenized on the event loop: a hop to a worker thread and
# back costs the loop more CPU than encoding them (2-core dev box: ~26 µs to encode 16 tokens, ~135 µs of
# CPU per hop). Anything longer goes to a worker thread, so a long prompt never stalls other requests.
INLINE_PROMPT_CHARS = 1024


async def off_loop(fn: Callable, *args):
    """fn(*args) on anyio's worker threads. Not the loop's default executor, though a hop there costs a
    little less CPU: model loads (orcd.server.model_pool) hold its few threads for seconds at a time."""
    return await to_thread.run_sync(fn, *args)


def stop_tuple(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(stop)


def build_sampling(f: SamplingFields, max_tokens: int) -> SamplingParams:
    def pick(name: str):
        value = getattr(f, name)
        return getattr(_DEFAULTS, name) if value is None else value

    names = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
             "frequency_penalty")
    return SamplingParams(max_tokens=max_tokens, seed=f.seed, stop=stop_tuple(f.stop),
                          ignore_eos=f.ignore_eos, **{n: pick(n) for n in names}).validate()


def precheck_sampling(f: SamplingFields) -> None:
    """Range errors name their field before any tokenizing work is spent on the prompt."""
    build_sampling(f, max_tokens=1)


async def encode_text(tokenizer, text: str, chat: bool, ctx: int) -> list[int]:
    """Tokenize off the event loop unless the prompt is short: a multi-megabyte prompt must not stall
    other requests."""
    if chat:
        return await encode_chat(tokenizer, [{"role": "user", "content": text}], ctx, param="prompt")
    if len(text) <= INLINE_PROMPT_CHARS:
        return tokenizer.encode_prompt(text)
    return await off_loop(tokenizer.encode_prompt, text)


async def encode_chat(tokenizer, messages: list[dict], ctx: int, param: str = "messages",
                      add_generation_prompt: bool = True, **template_vars) -> list[int]:
    """A file without a chat template gets the tokenizer's documented default (ChatML).
    Text beyond what a template may render (1 MiB) is a context overflow, counted without the template."""
    messages = template_call_ids(messages, getattr(getattr(tokenizer, "vocab", None), "chat_template", None))
    contents = [m["content"] for m in messages]
    if sum(map(len, contents)) > MAX_OUTPUT_CHARS:
        n = len(await off_loop(tokenizer.encode_prompt, "".join(contents)))
        what = "messages" if param == "messages" else "prompt"
        if n > ctx:
            raise context_overflow(ctx, n, None, what=what, param=param, at_least=True)
        raise ContextLengthExceededError(
            f"This model's maximum context length is {ctx} tokens. However, your {what} hold more than "
            f"{MAX_OUTPUT_CHARS} characters, more than a chat template may render. Please reduce the length "
            f"of the {what}.", param=param)
    if add_generation_prompt and not template_vars:
        if sum(map(len, contents)) <= INLINE_PROMPT_CHARS:  # short: on the loop, as encode_text does; a
            # hop per request to a worker thread that then contends for the GIL with the loop serialised
            # arrivals (fake-engine bench, 32 chat streams: TTFT p50 91 ms vs 58 for generate)
            return tokenizer.encode_chat(messages)
        return await off_loop(tokenizer.encode_chat, messages)  # a template may be slow at any length
    return await off_loop(lambda: tokenizer.encode_chat(messages, add_generation_prompt, **template_vars))


def chat_messages(messages: list[ChatMessage]) -> list[dict]:
    """OpenAI messages -> template messages; tool calls and tool results as orcd.server.tools renders
    them. Function-call and image features are refused, never dropped."""
    return [history_message(m, f"messages.{i}", lambda mm, w=f"messages.{i}": _plain_message(mm, w))
            for i, m in enumerate(messages)]


def _plain_message(m: ChatMessage, where: str) -> dict:
    if m.role == "function" or m.tool_calls or m.tool_call_id or m.function_call:
        raise RequestError(f"{where}: function messages are not supported", param=where)
    for name in ("audio", "refusal"):
        if getattr(m, name) is not None:
            raise RequestError(f"{where}.{name} is not supported", param=f"{where}.{name}")
    content = m.content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if part.type != "text" or part.text is None:
                raise RequestError(f"{where}.content.{j}: only text parts are supported (got "
                                   f"{part.type!r})", param=f"{where}.content.{j}.type")
            parts.append(part.text)
        content = "".join(parts)
    msg = {"role": "system" if m.role == "developer" else m.role, "content": content or ""}
    if m.name is not None:
        msg["name"] = m.name
    if m.reasoning_content is not None:
        if m.role != "assistant":
            raise RequestError(f"{where}.reasoning_content: only an assistant message has reasoning",
                               param=f"{where}.reasoning_content")
        msg |= turn_reasoning(m.reasoning_content)
    return msg
