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
