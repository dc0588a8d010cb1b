"""The step message rank 0 sends its followers (driver._slim / _unslim): plain tuples that rebuild the
SchedulerOutput a follower needs, seeded or not, without penalty history or sampling parameters."""

from __future__ import annotations

import pickle

from orcd.distributed.driver import _slim, _unslim
from orcd.engine.io import ScheduledSeq, SchedulerOutput
from orcd.engine.sampling_params import SamplingParams


def test_followers_rebuild_the_step_and_its_seed_flag():
    greedy = SamplingParams(max_tokens=8, temperature=0.0)
    seeded = SamplingParams(max_tokens=8, temperature=0.7, seed=11)
    sched = SchedulerOutput([
        ScheduledSeq(3, [5, 6, 7], 16, [0, 4], True, greedy, penalty_token_ids=list(range(40))),
        ScheduledSeq(9, [8], 20, [2, 7], False, seeded, num_generated=4),
    ], 4)
    msg = pickle.loads(pickle.dumps(_slim(sched, "eager")))  # as broadcast_object_list carries it
    assert msg[0] == "step" and msg[3] is False  # input ids in the message, none broadcast
    assert msg[4] == "eager"  # the executor rank 0 picked: every rank runs it
    assert _slim(sched, "decode_graph", prev=True)[3:] == (True, "decode_graph")
    got = _unslim(msg)
    assert got.num_tokens == 4
    for g, s in zip(got.seqs, sched.seqs, strict=True):
        assert (g.seq_id, g.token_ids, g.num_computed, g.block_table, g.sample) == \
            (s.seq_id, s.token_ids, s.num_computed, s.block_table, s.sample)
        assert (g.sampling.seed is None) == (s.sampling.seed is None)
        assert g.penalty_token_ids == []
