"""gpt-oss's Harmony chat template (llama.cpp's `openai-gpt-oss-120b.jinja`, fetched by orcd.testdata)
renders in orcd's sandbox exactly as transformers' apply_chat_template renders it: system and developer
messages, function tools, tool calls and results, reasoning (`thinking`) kept or dropped by turn,
reasoning_effort / model_identity / builtin_tools, and the template's own refusals."""

from __future__ import annotations

import pytest
from tokenizer_testdata import Vocabs

from orcd.errors import TemplateError
from orcd.tokenizer.chat import ChatTemplate

TEMPLATE = "openai-gpt-oss-120b.jinja"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
        "days": {"type": "integer"}, "alerts": {"type": "boolean"},
        "hours": {"type": "array", "items": {"type": "number"}}}}}}
USER = {"role": "user", "content": "What's the weather in Oslo? Naïve 🦙"}
CALL = {"role": "assistant", "thinking": "Need the weather tool.",
        "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Oslo", "unit": "c"}}}]}
RESULT = {"role": "tool", "content": '{"temp": -3, "sky": "snow"}'}
FINAL = {"role": "assistant", "thinking": "It is snowing.", "content": "-3 °C and snowing."}
CONVERSATIONS = {
    "one-user": ([USER], {}),
    "system-as-developer": ([{"role": "system", "content": "Answer in French."}, USER], {}),
    "developer-and-tools": ([{"role": "developer", "content": "Be brief."}, USER], {"tools": [WEATHER]}),
    "tool-call-pending": ([USER, CALL, RESULT], {"tools": [WEATHER]}),
    "tool-call-answered": ([USER, CALL, RESULT, FINAL, {"role": "user", "content": "Thanks!"}],
                           {"tools": [WEATHER]}),
    "earlier-thinking-dropped": ([USER, FINAL, {"role": "user", "content": "And tomorrow?"}], {}),
    "effort-identity-builtins": ([USER], {"reasoning_effort": "high", "model_identity": "You are Orca.",
                                          "builtin_tools": ["browser", "python"]}),
}
REFUSED = {
    "channel-in-content": [USER, {"role": "assistant", "content": "<|channel|>final<|message|>hi"}],
    "tool-without-call": [USER, RESULT],
}


@pytest.fixture(scope="module")
def source(vocabs: Vocabs) -> str:
    (path,) = [p for p in vocabs.templates() if p.name == TEMPLATE]
    return path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def hf_tokenizer(source: str):
    """A transformers tokenizer (a one-word vocabulary) carrying the template: apply_chat_template as is."""
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"x": 0}, unk_token="x")))
    tok.chat_template = source
    return tok


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("generation_prompt", [True, False], ids=["gen", "no-gen"])
def test_renders_like_transformers(source: str, hf_tokenizer, name: str, generation_prompt: bool) -> None:
    messages, extra = CONVERSATIONS[name]
    want = hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                            **extra)
    got = ChatTemplate(source, "<|startoftext|>", "<|return|>").render(messages, generation_prompt, **extra)
    assert got == want
    assert got.startswith("<|start|>system<|message|>") and "Current date: " in got


def test_last_assistant_turn_keeps_its_thinking_only_without_generation_prompt(source: str) -> None:
    t = ChatTemplate(source, "<|startoftext|>", "<|return|>")
    training = t.render([USER, FINAL], add_generation_prompt=False)
    assert training.endswith("<|channel|>analysis<|message|>It is snowing.<|end|>"
                             "<|start|>assistant<|channel|>final<|message|>-3 °C and snowing.<|return|>")
    assert "It is snowing." not in t.render([USER, FINAL, USER], add_generation_prompt=True)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_template_refusals_are_template_errors(source: str, hf_tokenizer, name: str) -> None:
    with pytest.raises(Exception):  # noqa: B017  (transformers raises jinja's TemplateError)
        hf_tokenizer.apply_chat_template(REFUSED[name], tokenize=False)
    with pytest.raises(TemplateError, match="chat template raised"):
        ChatTemplate(source, "<|startoftext|>", "<|return|>").render(REFUSED[name])


def test_encode_chat_parses_harmony_markup_not_contents(source: str) -> None:
    """With a Harmony vocabulary the template's markup becomes its special tokens, a user's text does not
    (<|end|> typed by a user stays text: it is a control token)."""
    from orcd.gguf.synth_vocab import synthetic_tokenizer_metadata
    from orcd.tokenizer import load_tokenizer

    md = synthetic_tokenizer_metadata(600, "gpt-oss", seed=1) | {"tokenizer.chat_template": source}
    tok = load_tokenizer(md)
    messages = [{"role": "user", "content": "a <|end|> b"}]
    ids = tok.encode_chat(messages)
    index = tok.vocab.index
    assert ids.count(index["<|end|>"]) == 2  # closing the system and the user message, not the user's text
    tail = [index["<|start|>"], *tok.encode("assistant")]
    assert ids[-len(tail):] == tail
    assert tok.decode(ids) == tok.render_chat(messages)
