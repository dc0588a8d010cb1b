"""The OpenAI logprobs shapes built from engine TokenLogprobs (no server needed)."""

from __future__ import annotations

from orcd.engine.io import TokenEvent, TokenLogprobs
from orcd.server.logprobs_format import FLOOR, CompletionLogprobs, TokenNames, chat_content, scored


class _Tok:
    pieces = {1: b" Paris", 2: b"\xe2\x80", 3: b"\x9c", 4: b"<|im_end|>"}

    def piece_bytes(self, i: int) -> bytes:
        return self.pieces[i]


def _ev(tid: int, lp: float, text: str, top=(), **kw) -> TokenEvent:
    return TokenEvent("r", tid, text, 0, logprobs=TokenLogprobs(lp, list(top)), **kw)


def test_token_names_keep_exact_bytes_and_never_invent_text():
    names = TokenNames(_Tok())
    assert names(1) == (" Paris", list(b" Paris"))
    assert names(2) == ("bytes:\\xe2\\x80", [0xE2, 0x80])
    assert names(4)[0] == "<|im_end|>"


def test_the_final_end_of_generation_token_is_left_out():
    evs = [_ev(1, -0.5, " Paris"), _ev(4, -0.1, "", finished=True, finish_reason="eos")]
    assert [tid for tid, _ in scored(evs)] == [1]
    evs[-1].finish_reason = "length"  # ended by max_tokens: the token is part of the output
    assert [tid for tid, _ in scored(evs)] == [1, 4]


def test_chat_entries_and_infinite_logprobs():
    names = TokenNames(_Tok())
    out = chat_content(names, scored([_ev(1, float("-inf"), " Paris", [(1, -0.2), (3, float("-inf"))])]))
    assert out == [{"token": " Paris", "logprob": FLOOR, "bytes": list(b" Paris"), "top_logprobs": [
        {"token": " Paris", "logprob": -0.2, "bytes": list(b" Paris")},
        {"token": "bytes:\\x9c", "logprob": FLOOR, "bytes": [0x9C]}]}]


def test_completion_offsets_follow_the_returned_text():
    block = CompletionLogprobs(TokenNames(_Tok()), offset=5)  # 5 echoed characters first
    first = block.block([_ev(1, -0.5, " Paris", [(2, -0.1)]), _ev(2, -1.0, "")])  # a held-back half char
    second = block.block([_ev(3, -2.0, "\u201c")])
    assert first["tokens"] == [" Paris", "bytes:\\xe2\\x80"] and first["text_offset"] == [5, 11]
    assert first["top_logprobs"][0] == {"bytes:\\xe2\\x80": -0.1, " Paris": -0.5}
    assert second["text_offset"] == [11] and second["tokens"] == ["bytes:\\x9c"]
