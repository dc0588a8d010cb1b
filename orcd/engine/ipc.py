"""The wire between an API process and the engine process (orcd.engine.core_process): one socket pair
per API process, one pickled message per send. Messages are plain tuples whose first item names them.

Down (API -> engine): ("add", request_id, prompt_token_ids, SamplingParams), ("abort", request_id),
("cancel_any", token, request_id) (any client's request of that id, or ID.N; answered
("cancelled", token, found)), ("warm_grammars",), ("stop",) (this client leaves: its requests are
aborted, its socket closed).
Up (engine -> API): ("ready", info dict) or ("failed", message, is_orcd_error) once at start, then
("step", [event tuples], stats dict) once per engine step that has events of this client's requests,
and with no events at most every 0.1 s while the engine is busy and once when it goes idle.
Request ids are the client's own; the engine keeps each client's apart.

Events travel as tuples of TokenEvent's fields, not as dataclasses: at 64 events a step, dump + load
(rebuilding the TokenEvents included) took 2.6-3.7x less CPU in two runs on the shared 2-core dev box
(bench/serving/ipc_cost.py; bench/results/serving_ipc_cost.md).
"""

from __future__ import annotations

import dataclasses
import operator
import pickle

from orcd.engine.io import TokenEvent, TokenLogprobs

PROTOCOL = pickle.HIGHEST_PROTOCOL


def dumps(message: tuple) -> bytes:
    return pickle.dumps(message, protocol=PROTOCOL)


def loads(data: bytes) -> tuple:
    return pickle.loads(data)


FIELDS = tuple(f.name for f in dataclasses.fields(TokenEvent))  # the wire order of an event's fields
LOGPROBS, FINISHED = FIELDS.index("logprobs"), FIELDS.index("finished")
assert FIELDS[0] == "request_id"  # the engine swaps it for the client's own id: (own_id,) + wire[1:]


_fields_of = operator.attrgetter(*FIELDS)


def event_to_wire(e: TokenEvent) -> tuple:
    values = _fields_of(e)
    lp = e.logprobs
    if lp is None:
        return values
    return values[:LOGPROBS] + ((lp.logprob, lp.top),) + values[LOGPROBS + 1:]


def event_from_wire(t: tuple) -> TokenEvent:
    lp = t[LOGPROBS]
    if lp is None:
        return TokenEvent(*t)
    values = list(t)
    values[LOGPROBS] = TokenLogprobs(lp[0], lp[1])
    return TokenEvent(*values)


def final_wire(request_id: str, reason: str, error: str | None) -> tuple:
    """The wire form of a final event with no token (a stream the engine can no longer end itself)."""
    event = TokenEvent(request_id, None, "", 0, finished=True, finish_reason=reason, error=error)
    return event_to_wire(event)
