"""Every SSE data payload stays on one line for clients that split with str.splitlines (httpx's
aiter_lines): NEL, LS and PS in token text are escaped. Found by bench/serving/soak.py (a random model's token
held U+0085 and the client saw a JSON line cut in two)."""

from __future__ import annotations

import json

from httpx._decoders import LineDecoder

from orcd.server.sse import sse_event


def test_unicode_line_breaks_stay_inside_the_json_line():
    text = "a\x85b\u2028c\u2029d\ne\rf\x0bg\x1ch"
    frame = sse_event({"i": 0, "id": 7, "t": text}, "token").decode("utf-8")
    lines = LineDecoder().decode(frame) + LineDecoder().flush()
    assert lines[0] == "event: token" and lines[1].startswith("data: ")
    assert json.loads(lines[1][len("data: "):])["t"] == text
    assert [ln for ln in lines[2:] if ln] == []
    assert frame.count("\n") == 3  # event line, data line, blank line: the strict SSE view agrees
