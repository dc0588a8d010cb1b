"""Responses input items whose `type`, `role` or part `type` is a JSON array or object (unhashable in
Python): a 400 naming the field, never a 500 (found by test_responses.py's fuzzed bodies)."""

from __future__ import annotations

import pytest

from orcd.errors import RequestError
from orcd.server.responses_format import input_messages


@pytest.mark.parametrize(("items", "param"), [
    ([{"type": []}], "input.0.type"),
    ([{"type": {"a": 1}}], "input.0.type"),
    ([{"role": [], "content": "x"}], "input.0.role"),
    ([{"role": {}, "content": "x"}], "input.0.role"),
    ([{"role": "user", "content": [{"type": ["input_text"], "text": "x"}]}], "input.0.content.0.type"),
])
def test_unhashable_kinds_are_a_400_naming_the_field(items, param):
    with pytest.raises(RequestError) as exc:
        input_messages(None, items)
    assert exc.value.param == param


def test_a_plain_message_still_renders():
    items = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    want = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert input_messages("Be brief.", items) == want
