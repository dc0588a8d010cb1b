"""orcd.tokenizer.harmony: gpt-oss completions split into reasoning_content / content / tool calls, whole and
streamed in arbitrary pieces, with or without the control markers that decoding may skip."""

from __future__ import annotations

import random

import pytest

from orcd.tokenizer.harmony import CONTENT, REASONING, TOOL_CALL, HarmonyParser, ToolCall, parse_harmony

ANSWER = ("<|channel|>analysis<|message|>User asks 2+2. Simple: 4.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4 <b>|</b> done<|return|>")
CALL = ("<|channel|>analysis<|message|>Need weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Oslo"}<|call|>')
CALL_RECIPIENT_FIRST = ('<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{"q": 1}'
                        "<|call|>")


def skipped(text: str) -> str:
    """As decoded with special tokens skipped: the control markers gone, the user-defined ones kept."""
    for m in ("<|end|>", "<|return|>", "<|call|>"):
        text = text.replace(m, "")
    return text


@pytest.mark.parametrize("decode", [str, skipped], ids=["markers", "controls-skipped"])
def test_reasoning_and_final(decode) -> None:
    r = parse_harmony(decode(ANSWER))
    assert r.reasoning_content == "User asks 2+2. Simple: 4."
    assert r.content == "2 + 2 = 4 <b>|</b> done" and r.tool_calls == []


@pytest.mark.parametrize("decode", [str, skipped], ids=["markers", "controls-skipped"])
def test_tool_calls(decode) -> None:
    r = parse_harmony(decode(CALL))
    assert r.reasoning_content == "Need weather." and r.content == ""
    assert r.tool_calls == [ToolCall("get_weather", '{"city": "Oslo"}', "json")]
    r = parse_harmony(decode(CALL_RECIPIENT_FIRST))
    assert r.reasoning_content is None and r.tool_calls == [ToolCall("lookup", '{"q": 1}', "json")]


def test_plain_text_preamble_and_truncation() -> None:
    assert parse_harmony("no markup here").content == "no markup here"
    assert parse_harmony("no markup here").reasoning_content is None
    preamble = "<|channel|>commentary<|message|>Checking the weather now.<|end|>"
    assert parse_harmony(preamble).content == "Checking the weather now."
    cut = parse_harmony("<|channel|>analysis<|message|>Still think")  # max_tokens hit mid-reasoning
    assert (cut.reasoning_content, cut.content) == ("Still think", "")


@pytest.mark.parametrize("text", [ANSWER, CALL, skipped(ANSWER)], ids=["answer", "call", "skipped"])
def test_streamed_in_random_pieces_matches_whole(text: str) -> None:
    rng = random.Random(0)
    whole = parse_harmony(text)
    for _ in range(20):
        p, got = HarmonyParser(), {REASONING: "", CONTENT: "", TOOL_CALL: ""}
        i = 0
        while i < len(text):
            n = rng.randint(1, 6)
            for kind, delta in p.push(text[i : i + n]):
                assert "<|" not in delta  # no marker (or half of one) ever leaks into a delta
                got[kind] += delta
            i += n
        for kind, delta in p.flush():
            got[kind] += delta
        assert got[REASONING] == (whole.reasoning_content or "") and got[CONTENT] == whole.content
        assert got[TOOL_CALL] == "".join(c.arguments for c in whole.tool_calls)


def test_reasoning_streams_before_the_answer_exists() -> None:
    p = HarmonyParser()
    assert p.push("<|channel|>analysis<|mess") == []
    assert p.push("age|>Let me") == [(REASONING, "Let me")]
    assert p.push(" think<|en") == [(REASONING, " think")]
    assert p.push("d|><|start|>assistant<|channel|>final<|message|>Hi") == [(CONTENT, "Hi")]


def test_streamed_tool_call_names_its_function_before_the_arguments() -> None:
    p = HarmonyParser()
    p.push("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>")
    assert p.current is not None and p.current.recipient == "functions.get_weather"
    assert p.current.content_type == "json"
    assert p.push('{"city": "Os') == [(TOOL_CALL, '{"city": "Os')]
    assert p.push('lo"}<|call|>') == [(TOOL_CALL, 'lo"}')] and p.current is None
