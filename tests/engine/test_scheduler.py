import random

from engine_fakes import FakeRunner, next_token

from orcd.engine.block_manager import BlockManager
from orcd.engine.io import ModelRunnerOutput
from orcd.engine.sampling_params import SamplingParams
from orcd.engine.scheduler import Scheduler
from orcd.engine.sequence import Sequence


def make(num_blocks=32, block_size=4, max_seqs=8, budget=16, caching=True):
    bm = BlockManager(num_blocks, block_size, caching)
    return Scheduler(bm, max_seqs, budget), FakeRunner(num_blocks, block_size)


def drive(sched: Scheduler, runner: FakeRunner, max_tokens: dict[int, int], steps=10_000):
    """Run schedule -> fake execute -> update until idle, checking invariants every step."""
    done = []
    for _ in range(steps):
        if not sched.has_work():
            return done
        out = sched.schedule()
        assert out.num_tokens == sum(len(s.token_ids) for s in out.seqs) <= sched.max_num_batched_tokens
        assert len(out.seqs) <= sched.max_num_seqs and len(sched.running) <= sched.max_num_seqs
        assert len({s.seq_id for s in out.seqs}) == len(out.seqs)
        live = {q.seq_id: q for q in sched.running}
        for s in out.seqs:
            seq = live[s.seq_id]
            assert s.num_computed == seq.num_computed
            assert s.sample == (s.num_computed + len(s.token_ids) == seq.num_tokens)
        result = runner.execute(out)
        for upd in sched.update(out, result):
            if upd.seq.num_generated >= max_tokens[upd.seq.seq_id]:
                sched.finish(upd.seq, "length")
                done.append(upd.seq)
        sched.bm.check_integrity(sched.live_seqs())
    raise AssertionError("did not finish")


def expected(seq: Sequence, n: int) -> list[int]:
    history, out = list(seq.prompt_token_ids), []
    for _ in range(n):
        tok = next_token(history, len(out), seq.sampling)
        out.append(tok)
        history.append(tok)
    return out


def test_random_workload_respects_budgets_and_leaks_nothing():
    rng = random.Random(0)
    for caching in (True, False):
        sched, runner = make(num_blocks=24, budget=10, max_seqs=5, caching=caching)
        seqs, max_tokens = [], {}
        for i in range(20):
            prefix = [1, 2, 3, 4, 5, 6, 7, 8] if i % 3 == 0 else []
            s = Sequence(f"r{i}", prefix + [rng.randrange(1, 40) for _ in range(rng.randrange(1, 30))],
                         SamplingParams(temperature=0.0))
            seqs.append(s)
            max_tokens[s.seq_id] = rng.randrange(1, 20)
            sched.add(s)
        done = drive(sched, runner, max_tokens)
        assert len(done) == 20
        assert sched.bm.num_free_blocks == sched.bm.num_blocks
        assert sched.num_preemptions > 0  # 24 blocks of 4 cannot hold 5 of these at once
        for s in seqs:
            assert s.output_token_ids == expected(s, max_tokens[s.seq_id])


def test_decodes_go_first_and_long_prompts_are_chunked():
    sched, runner = make(num_blocks=64, budget=8, max_seqs=4)
    short = Sequence("short", [1, 2, 3], SamplingParams(temperature=0.0))
    sched.add(short)
    out = sched.schedule()
    sched.update(out, runner.execute(out))
    long = Sequence("long", list(range(1, 31)), SamplingParams(temperature=0.0))
    sched.add(long)
    chunks = []
    while long.num_generated == 0:
        out = sched.schedule()
        by_id = {s.seq_id: s for s in out.seqs}
        assert len(by_id[short.seq_id].token_ids) == 1  # the decode is in every step
        assert out.seqs[0].seq_id == short.seq_id
        chunks.append(len(by_id[long.seq_id].token_ids))
        assert by_id[long.seq_id].sample == (long.num_computed + chunks[-1] == 30)
        sched.update(out, runner.execute(out))
    assert chunks == [7, 7, 7, 7, 2]
    assert long.output_token_ids == expected(long, 1)


def test_preempted_sequence_resumes_with_the_same_tokens():
    sched, runner = make(num_blocks=6, block_size=4, budget=64, max_seqs=4, caching=False)
    a = Sequence("a", list(range(1, 9)), SamplingParams(temperature=0.7, seed=5))
    b = Sequence("b", list(range(11, 19)), SamplingParams(temperature=0.0))
    sched.add(a)
    sched.add(b)
    drive(sched, runner, {a.seq_id: 14, b.seq_id: 14})
    assert b.num_preemptions >= 1 and a.num_preemptions == 0
    assert a.output_token_ids == expected(a, 14)
    assert b.output_token_ids == expected(b, 14)


def test_waiting_sequences_wait_for_a_seat():
    sched, runner = make(max_seqs=2)
    seqs = [Sequence(f"r{i}", [i + 1], SamplingParams()) for i in range(3)]
    for s in seqs:
        sched.add(s)
    out = sched.schedule()
    assert [s.seq_id for s in out.seqs] == [seqs[0].seq_id, seqs[1].seq_id]
    assert list(sched.waiting) == [seqs[2]]


def test_finish_frees_blocks_of_running_and_waiting():
    sched, runner = make()
    a = Sequence("a", list(range(1, 10)), SamplingParams())
    b = Sequence("b", [1], SamplingParams())
    sched.add(a)
    out = sched.schedule()
    sched.add(b)
    sched.update(out, runner.execute(out))
    assert sched.bm.num_used_blocks == 3
    sched.finish(a, "cancelled")
    sched.finish(b, "cancelled")
    sched.finish(b, "cancelled")  # idempotent
    assert not sched.has_work() and sched.bm.num_used_blocks == 0
    sched.bm.check_integrity([])


def test_failed_sequences_are_reported_not_advanced():
    sched, runner = make()
    a = Sequence("a", [1, 2], SamplingParams())
    sched.add(a)
    out = sched.schedule()
    ups = sched.update(out, ModelRunnerOutput(sampled={}, failed={a.seq_id: "boom"}))
    assert ups[0].error == "boom" and a.num_computed == 0 and a.output_token_ids == []
