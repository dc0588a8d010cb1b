"""LangChain's ChatOpenAI against the real server: logprobs (invoke and stream) and n choices."""

from __future__ import annotations

import pytest

langchain_openai = pytest.importorskip("langchain_openai")
from langchain_core.messages import HumanMessage  # noqa: E402 (after the skip)

MODEL = "tiny-qwen2"


@pytest.fixture()
def chat(server, monkeypatch):
    monkeypatch.setenv("LANGSMITH_TRACING", "false")  # offline

    def make(**kw):
        return langchain_openai.ChatOpenAI(base_url=server.url + "/v1", api_key=server.api_key, model=MODEL,
                                           max_retries=0, timeout=60, **kw)
    return make


def test_logprobs_reach_response_metadata(chat):
    llm = chat(max_tokens=4, logprobs=True, top_logprobs=2, seed=3, extra_body={"ignore_eos": True})
    content = llm.invoke("hi").response_metadata["logprobs"]["content"]
    assert len(content) == 4 and all(len(e["top_logprobs"]) == 2 for e in content)
    streamed = [e for chunk in llm.stream("hi") if chunk.response_metadata.get("logprobs")
                for e in chunk.response_metadata["logprobs"]["content"]]
    assert [e["token"] for e in streamed] == [e["token"] for e in content]


def test_n_generations(chat):
    llm = chat(max_tokens=4, n=3, seed=5, extra_body={"ignore_eos": True})
    gens = llm.generate([[HumanMessage("hi")]]).generations[0]
    assert len(gens) == 3 and len({g.text for g in gens}) > 1


def test_bind_tools_round_trip(chat):
    """bind_tools sends `tools` (the request is accepted and rendered); a ToolMessage history renders too."""
    from langchain_core.messages import AIMessage, ToolMessage

    def get_weather(city: str) -> str:
        """Weather of a city."""
        return "rain"

    llm = chat(max_tokens=4, seed=1).bind_tools([get_weather])
    first = llm.invoke("Weather in Oslo?")
    assert isinstance(first, AIMessage) and first.tool_calls == []  # a random tiny model calls nothing
    call = {"name": "get_weather", "args": {"city": "Oslo"}, "id": "call_1"}
    after = llm.invoke([HumanMessage("Weather in Oslo?"), AIMessage("", tool_calls=[call]),
                        ToolMessage("12 C, rain", tool_call_id="call_1")])
    assert isinstance(after, AIMessage)
    assert after.usage_metadata["input_tokens"] > first.usage_metadata["input_tokens"]
