"""The wire between the API process and the engine process (orcd.engine.core_process): one socket pair,
one pickled message per send. Messages are plain tuples whose first item names them.

Down (API -> engine): ("add", request_id, prompt_token_ids, SamplingParams), ("abort", request_id),
("abort_all",), ("warm_grammars",), ("stop",).
Up (engine -> API): ("ready", info dict) or ("failed", message, is_orcd_error) once at start, then
("step", [event tuples], stats dict) once per engine step that changed anything.

Events travel as tuples, not TokenEvent dataclasses: a tuple of ints and strs pickles ~3x faster
(bench/serving/ipc_cost.py measures it).
"""

from __future__ import annotations

import pickle

from orcd.engine.io import TokenEvent, TokenLogprobs

PROTOCOL = pickle.HIGHEST_PROTOCOL


def dumps(message: tuple) -> bytes:
    return pickle.dumps(message, protocol=PROTOCOL)


def loads(data: bytes) -> tuple:
    return pickle.loads(data)


def event_to_wire(e: TokenEvent) -> tuple:
    lp = e.logprobs
    return (e.request_id, e.token_id, e.text, e.index, e.finished, e.finish_reason, e.error,
            e.prompt_tokens, e.generated_tokens, None if lp is None else (lp.logprob, lp.top), e.queue_s)


def event_from_wire(t: tuple) -> TokenEvent:
    rid, token_id, text, index, finished, reason, error, n_prompt, n_gen, lp, queue_s = t
    return TokenEvent(rid, token_id, text, index, finished, reason, error, n_prompt, n_gen,
                      None if lp is None else TokenLogprobs(lp[0], lp[1]), queue_s)
