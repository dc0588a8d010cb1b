"""The OpenAI Agents SDK (`openai-agents`) on orcd's /v1/responses: an agent with a function tool and a
typed final output runs its loop against the real `orcd serve` of these tests -- a forced call (the tiny
model writes it through the grammar), the tool's result sent back as input, then a final answer held to
the output schema -- whole (Runner.run) and streamed (Runner.run_streamed)."""

from __future__ import annotations

import asyncio

import openai
import pytest
from pydantic import BaseModel

agents = pytest.importorskip("agents")

MODEL = "tiny-qwen2"


class Answer(BaseModel):
    rain: bool


def _agent(server, calls: list[str]):
    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather of a city."""
        calls.append(city)
        return "12 C, rain"

    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=server.api_key, max_retries=0,
                                timeout=120)
    # tool_choice "required" for the first turn; the SDK resets it to auto once the tool has run
    settings = agents.ModelSettings(tool_choice="required", max_tokens=120, temperature=0)
    return agents.Agent(name="weather", instructions="Answer briefly.", tools=[get_weather],
                        output_type=Answer, model_settings=settings,
                        model=agents.OpenAIResponsesModel(model=MODEL, openai_client=client))


@pytest.mark.parametrize("streamed", [False, True])
def test_agent_calls_the_tool_then_answers(server, streamed):
    agents.set_tracing_disabled(True)  # no trace export (it would go to OpenAI)
    calls: list[str] = []
    agent = _agent(server, calls)

    async def run():
        if not streamed:
            return await agents.Runner.run(agent, "Weather in Oslo?", max_turns=3), set()
        result = agents.Runner.run_streamed(agent, "Weather in Oslo?", max_turns=3)
        kinds = {event.type async for event in result.stream_events()}
        return result, kinds

    result, kinds = asyncio.run(run())
    assert len(calls) == 1 and isinstance(result.final_output, Answer)
    assert [type(item).__name__ for item in result.new_items] == ["ToolCallItem", "ToolCallOutputItem",
                                                                  "MessageOutputItem"]
    assert not streamed or {"raw_response_event", "run_item_stream_event"} <= kinds
