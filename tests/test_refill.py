"""Refills (an engine planning admissions, prefills and preemptions while its queue waits for
room) against the span-by-span engine, and proof that the planned path is the one taken.

The oracle, drain and invariant tests run the queue-bound scenarios too; these tests add what
only a refill has: a plan that stops where the queue it saw ends, and far fewer events.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest
from event_count import simulate_counting_events
from random_scenarios import outcome, queued_scenario
from small_scenarios import make

import rlsim.simulator.engine as engine_module
import rlsim.simulator.refill as refill
from rlsim.placement import resolve
from rlsim.scenario import Scenario, load_scenario
from rlsim.simulator.batch import RunningBatch
from rlsim.simulator.costs import Costs
from rlsim.simulator.engine import Engine
from rlsim.simulator.run import SimResult, simulate
from rlsim.simulator.work import Group, Sequence


def _queue_bound(mode: str = "sync") -> Scenario:
    """One engine with a batch of 4 and 64 sequences per step: each finish admits the next."""
    return make(
        {
            "cluster": {"gpus_per_node": 2},
            "algorithm": {"prompts_per_step": 8, "group_size": 8},
            "pipeline": {
                "mode": mode,
                "inference": {"gpus": 1, "max_batch": 4},
                "training": {"gpus": 1},
            },
        }
    )


def _kv_pressured(max_batch: int) -> Scenario:
    """A 7B engine whose cache (23% of its memory) holds a fraction of 128 long responses."""
    return make(
        {
            "model": "qwen2.5-7b",
            "cluster": {"gpus_per_node": 3},
            "algorithm": {"prompts_per_step": 16, "group_size": 8},
            "workload": {"response_tokens": {"kind": "lognormal", "mean": 2000, "sigma": 0.9, "max": 6000}},
            "pipeline": {
                "inference": {"gpus": 1, "max_batch": max_batch, "kv_memory_fraction": 0.23},
                "training": {"gpus": 2, "micro_batch_tokens": 16384},
            },
        }
    )


def _events(sc: Scenario, monkeypatch, drains: bool) -> tuple[int, SimResult]:
    """SimPy events processed by a simulation of sc (with or without planning ahead)."""
    return simulate_counting_events(sc, monkeypatch, ((Engine, "drains", drains),))


@pytest.mark.parametrize("mode", ["colocated", "sync", "async"])
def test_a_queue_bound_engine_takes_few_events(mode: str, monkeypatch) -> None:
    """Span by span, every finish costs a span and a prefill event; a refill plans them all."""
    sc = _queue_bound(mode)
    planned, fast = _events(sc, monkeypatch, drains=True)
    stepped, slow = _events(sc, monkeypatch, drains=False)
    finishes = sc.steps * sc.algorithm.prompts_per_step * sc.algorithm.group_size
    assert outcome(fast) == outcome(slow)
    assert stepped > 2 * finishes  # the scenario is queue-bound: one admission per finish
    assert planned < finishes / 2  # a few events per group and step, not per finish


def test_a_refill_stops_where_its_snapshot_of_the_queue_ends(monkeypatch) -> None:
    """A plan may look at only 2 queued sequences: it stops there and the engine plans again,
    with the same result as one long plan and as the span-by-span engine."""
    sc = _queue_bound("async")
    whole = simulate(sc)
    with monkeypatch.context() as m:
        m.setattr(refill, "SNAPSHOT_ITEMS", 2)
        short = simulate(sc)
    with monkeypatch.context() as m:
        m.setattr(Engine, "drains", False)
        spans = simulate(sc)
    assert outcome(whole) == outcome(short) == outcome(spans)
    assert whole.recorder.end_s == short.recorder.end_s
    assert math.isclose(whole.recorder.end_s, spans.recorder.end_s, rel_tol=1e-12)


@pytest.mark.parametrize("i", range(0, 30, 3))
def test_short_snapshots_change_nothing(i: int, monkeypatch) -> None:
    """Stopping early anywhere (here after every 3 queued sequences) is exact too."""
    sc = queued_scenario(i)
    whole = simulate(sc)
    with monkeypatch.context() as m:
        m.setattr(refill, "SNAPSHOT_ITEMS", 3)
        short = simulate(sc)
    assert outcome(whole) == outcome(short)
    assert [s.end_s for s in whole.recorder.steps] == [s.end_s for s in short.recorder.steps]


def test_a_kv_bound_engine_preempts_inside_its_plan(monkeypatch) -> None:
    """A cache too small for the batch: admissions wait for room and the newest sequence is
    preempted, all planned; the timeline and tokens are the span-by-span engine's."""
    sc = _kv_pressured(max_batch=256)
    planned, fast = _events(sc, monkeypatch, drains=True)
    stepped, slow = _events(sc, monkeypatch, drains=False)
    assert fast.recorder.preemptions > 0
    assert outcome(fast) == outcome(slow)
    assert math.isclose(fast.recorder.end_s, slow.recorder.end_s, rel_tol=1e-12)
    assert planned < stepped / 5


def _assert_same_plan(fast, slow) -> None:
    assert (fast is None) == (slow is None)
    if fast is not None:
        assert np.array_equal(fast.steps, slow.steps) and np.array_equal(fast.tokens, slow.tokens)
        assert fast.end_s == slow.end_s and fast.wake_s == slow.wake_s
        assert fast.orders == slow.orders
        assert all(a is b for a, b in zip(fast.finishers, slow.finishers, strict=True))
        assert all(a is b for a, b in zip(fast.admitted, slow.admitted, strict=True))
        assert np.array_equal(fast.admits[: len(fast.admitted)], slow.admits[: len(slow.admitted)])
        assert fast.logs == slow.logs and fast.slow == slow.slow


def _same_plans(sc: Scenario, monkeypatch) -> tuple[int, int]:
    """Simulate sc, planning every refill twice: with its slot-bound stretch (slot_bound.py) and
    with the general loop alone; the two plans must be equal field by field. Returns (plans,
    steps planned by stretches)."""

    plan = refill.plan_refill
    counts = [0, 0]
    stretch = refill.slot_bound

    def both(batch, queued, version, now, costs, cache, lazy=False):  # (whole plans: compared field by field)
        lengths = []

        def measured(*args):
            s = stretch(*args)
            lengths.append(0 if s is None else len(s.rows))
            return s

        with monkeypatch.context() as m:
            m.setattr(refill, "slot_bound", measured)
            fast = plan(batch, queued, version, now, costs, cache)
        with monkeypatch.context() as m:
            m.setattr(refill, "slot_bound", lambda *a: None)
            slow = plan(batch, queued, version, now, costs, cache)
        _assert_same_plan(fast, slow)
        if fast is not None:
            counts[0] += 1
            counts[1] += sum(lengths)
        return fast

    with monkeypatch.context() as m:
        m.setattr(engine_module, "plan_refill", both)
        simulate(sc)
    return counts[0], counts[1]


@pytest.mark.parametrize("mode", ["colocated", "sync", "one_step_off", "async"])
def test_the_slot_bound_stretch_plans_what_the_general_loop_plans(mode: str, monkeypatch) -> None:
    """A full batch with a long queue: the stretch plans nearly all of each refill, and every
    plan is the general loop's, row for row and time for time."""
    sc = make(
        {
            "cluster": {"gpus_per_node": 2},
            "algorithm": {"prompts_per_step": 32, "group_size": 8},
            "workload": {"response_tokens": {"kind": "lognormal", "mean": 600, "sigma": 0.9, "max": 3000}},
            "pipeline": {
                "mode": mode,
                "inference": {"gpus": 1, "max_batch": 16},
                "training": {"gpus": 1},
            },
        }
    )
    plans, stretched = _same_plans(sc, monkeypatch)
    assert plans > 0
    assert stretched > sc.steps * 32 * 8  # two steps (a span and a prefill) per admission, most of them here


@pytest.mark.parametrize("i", range(0, 30, 2))
def test_stretches_on_random_queue_bound_scenarios_plan_the_same(i: int, monkeypatch) -> None:
    """Random queue-bound scenarios (KV pressure, ties, shared prompt prefills, weights): the same plans."""
    _same_plans(queued_scenario(i), monkeypatch)


def test_a_stretch_stops_before_the_cache_binds(monkeypatch) -> None:
    """A cache that fills part-way: stretches end before it binds and the general loop goes on
    (preempting); the plans are still the general loop's."""
    sc = _kv_pressured(max_batch=32)
    plans, stretched = _same_plans(sc, monkeypatch)
    assert plans > 0 and stretched > 0
    assert simulate(sc).recorder.preemptions > 0


def _group(gid: int, prompt: int, responses: list[int], min_version: int = 0) -> list[Sequence]:
    g = Group(gid, 0, min_version, prompt, size=len(responses))
    g.sequences = [Sequence(g, i, prompt, r, prompt + r) for i, r in enumerate(responses)]
    return g.sequences


@pytest.mark.parametrize("seed", range(3))
def test_stretches_end_exactly_where_the_cache_would_bind(seed: int, monkeypatch) -> None:
    """By hand: a full batch of 4 and a queue with ties, groups sharing a prompt, one-token
    responses and a group waiting for newer weights, under every cache size from one that
    cannot hold an admission to one that never binds: each plan is the general loop's (so
    each stretch stops exactly where the cache, the queue or the weights would first change it)."""
    costs = Costs(resolve(make()))
    rng = np.random.default_rng(seed)

    def groups(first: int, n: int) -> list[Sequence]:
        out = []
        for gid in range(first, first + n):
            out += _group(gid, int(rng.integers(5, 120)), [int(x) for x in rng.integers(2, 40, size=3)])
        return out

    ties = groups(1, 8) + _group(9, 20, [9, 9]) + groups(10, 2) + _group(12, 20, [1, 9]) + groups(13, 2)
    blocked = groups(15, 8) + _group(23, 20, [9], min_version=1) + groups(24, 3)
    prompt, responses = int(rng.integers(5, 120)), [int(x) for x in rng.integers(2, 60, size=4)]
    for capacity in range(4 * prompt + 100, 4 * prompt + 400):
        for share in (True, False):
            for items in (ties, blocked):
                batch = RunningBatch(capacity_tokens=10_000, max_batch=4, share_prompt_prefill=share)
                batch.admit(deque(_group(0, prompt, responses)), 0)
                batch.capacity = capacity
                plans = []
                for stretch in (refill.slot_bound, lambda *a: None):
                    with monkeypatch.context() as m:
                        m.setattr(refill, "slot_bound", stretch)
                        plans.append(refill.plan_refill(batch, deque(items), 0, 0.0, costs, {}))
                _assert_same_plan(*plans)


def test_a_stretch_ignores_the_engines_heap_entries_of_sequences_gone_since(monkeypatch) -> None:
    """An engine that went span by span keeps its finish heap, with entries of sequences preempted
    (and readmitted under a new order) since it was built; a refill starting there plans from the
    live batch: with its stretch it plans what the general loop plans, and does not fail."""
    costs = Costs(resolve(make()))
    batch = RunningBatch(capacity_tokens=10_000, max_batch=4, share_prompt_prefill=True)
    batch.admit(deque(_group(0, 40, [30, 25, 20, 35])), 0)
    batch.next_finish()  # the span-by-span engine builds its heap
    batch.advance(3, 0, 0.0)
    batch.preempt_newest()
    batch.admit(deque(), 0)  # its own preempted work, readmitted under a new order
    stale = [o for _, o in batch.heap if o not in batch.running]
    assert stale and not batch.local and len(batch.running) == 4
    queue = _group(1, 30, [12, 18, 9]) + _group(2, 25, [14, 7, 22])
    plans = []
    for stretch in (refill.slot_bound, lambda *a: None):
        with monkeypatch.context() as m:
            m.setattr(refill, "slot_bound", stretch)
            plans.append(refill.plan_refill(batch, deque(queue), 0, 0.0, costs, {}))
    assert plans[0] is not None
    _assert_same_plan(*plans)


def _same_small_plans(sc: Scenario, monkeypatch) -> int:
    """Simulate sc, finishing every refill twice: in plain Python (`_small_refill`, whatever its
    length) and with numpy; the two plans must be equal field by field. Returns the plans made."""
    plan = refill.plan_refill
    made = [0]

    def both(batch, queued, version, now, costs, cache, lazy=False):  # (whole plans: compared field by field)
        with monkeypatch.context() as m:
            m.setattr(refill, "SMALL_PLAN", 1 << 30)
            small = plan(batch, queued, version, now, costs, cache)
        with monkeypatch.context() as m:
            m.setattr(refill, "SMALL_PLAN", -1)
            bulk = plan(batch, queued, version, now, costs, cache)
        _assert_same_plan(small, bulk)
        if small is not None:
            assert small.steps.dtype == bulk.steps.dtype and small.admits.shape == bulk.admits.shape
            made[0] += 1
        return bulk

    with monkeypatch.context() as m:
        m.setattr(engine_module, "plan_refill", both)
        simulate(sc)
    return made[0]


@pytest.mark.parametrize("max_batch", [32, 256])
def test_a_short_plan_in_plain_python_is_the_numpy_plan(max_batch: int, monkeypatch) -> None:
    """KV pressure (preemptions, readmissions, prefills of one and of several contexts): the plain
    Python end of a plan makes the very plan numpy makes, row for row and time for time."""
    assert _same_small_plans(_kv_pressured(max_batch), monkeypatch) > 0


@pytest.mark.parametrize("mode", ["sync", "streaming"])
def test_long_cot_plans_in_plain_python_are_the_numpy_plans(mode: str, monkeypatch) -> None:
    """long-cot's KV-bound engines, on their own queues and on a shared one: many short plans."""
    assert _same_small_plans(load_scenario("long-cot", ["steps=2"]).with_mode(mode), monkeypatch) > 10


@pytest.mark.parametrize("i", range(1, 30, 4))
def test_short_plans_on_random_queue_bound_scenarios_are_the_numpy_plans(i: int, monkeypatch) -> None:
    _same_small_plans(queued_scenario(i), monkeypatch)


def _commits_forced(sc: Scenario, monkeypatch, by_steps: bool) -> tuple[SimResult, int]:
    """Simulate sc with every refill committed step by step (True) or in bulk wherever no step
    in the range preempts or readmits (False); returns the result and the plans that differed."""
    init = refill.Refill.__post_init__
    changed = [0]

    def forced(self) -> None:
        init(self)
        changed[0] += self.by_steps != by_steps
        self.by_steps = by_steps

    with monkeypatch.context() as m:
        m.setattr(refill.Refill, "__post_init__", forced)
        return simulate(sc), changed[0]


def _logged(result: SimResult) -> tuple:
    """Everything the recorder logged per engine, exactly: states, batches and the running batch."""
    rec = result.recorder
    tracks = {
        a: (t.states, list(t.start_s), list(t.end_s), list(t.steps), list(t.versions)) for a, t in rec.tracks.items()
    }
    batches = {a: (list(log.times), list(log.values)) for a, log in rec.batch_logs.items()}
    return tracks, batches, rec.running_samples, [s.end_s for s in rec.steps]


@pytest.mark.parametrize("case", ["kv-bound", "queue-bound", 1, 5, 13])
def test_committing_a_refill_step_by_step_or_in_bulk_is_the_same(case, monkeypatch) -> None:
    """`Refill.by_steps` only picks the cheaper commit path: both leave the same state and logs."""
    if case == "kv-bound":
        sc = _kv_pressured(max_batch=256)
    elif case == "queue-bound":
        sc = _queue_bound("async")
    else:
        sc = queued_scenario(case)
    steps, to_steps = _commits_forced(sc, monkeypatch, by_steps=True)
    bulk, to_bulk = _commits_forced(sc, monkeypatch, by_steps=False)
    assert to_steps + to_bulk > 0  # the forcing changed some plan's path
    assert outcome(steps) == outcome(bulk)
    assert _logged(steps) == _logged(bulk)


def _full_batch_and_queue(order: int) -> tuple[RunningBatch, list[Sequence]]:
    """A full batch of 4 whose next admission order is `order`, and 12 queued sequences (ties)."""
    batch = RunningBatch(capacity_tokens=100_000, max_batch=4, share_prompt_prefill=True)
    batch.order = order
    batch.admit(deque(_group(0, 40, [30, 25, 20, 30])), 0)
    queue = _group(1, 30, [12, 18, 9, 12]) + _group(2, 25, [14, 7, 22, 7]) + _group(3, 20, [5, 30, 5, 9])
    return batch, queue


@pytest.mark.parametrize("order", [0, 2**32 - 17, 2**32 - 9, 2**32 - 4])
def test_a_stretch_past_its_heap_keys_low_bits_leaves_the_plan_to_the_general_loop(order: int, monkeypatch) -> None:
    """The stretch keys each slot by (finish iteration << 32) | admission order: the orders of
    the batch (from `order`) and of the 12 queued sequences it would admit must stay below
    2**32, or it plans nothing (the general loop plans all). Either way the plan is the general
    loop's, ties in finish iteration taken in admission order."""
    costs = Costs(resolve(make()))
    batch, queue = _full_batch_and_queue(order)
    made, stretch = [], refill.slot_bound

    def measured(*args):
        s = stretch(*args)
        made.append(s is not None)
        return s

    plans = []
    for planner in (measured, lambda *a: None):
        with monkeypatch.context() as m:
            m.setattr(refill, "slot_bound", planner)
            plans.append(refill.plan_refill(batch, deque(queue), 0, 0.0, costs, {}))
    _assert_same_plan(*plans)
    assert plans[0] is not None
    # the queue's 12 take orders order + 4 .. order + 15: the last below 2**32 - 1 only from the first two
    assert made == [order + 4 + 12 <= 2**32 - 1]


def test_a_bulk_commits_columns_are_the_plans_rows_and_admissions() -> None:
    """`PlanLogs` holds the columns a bulk commit reads (planned.py `_commit_bulk`): each one the
    plan's step rows' column, and each admission's tokens after its prefill and finish iteration."""
    costs = Costs(resolve(make()))
    batch, queue = _full_batch_and_queue(0)
    r = refill.plan_refill(batch, deque(queue), 0, 0.0, costs, {})
    logs = r.logs
    for name, column in [("fin", refill.FIN), ("adm", refill.ADM), ("kv", refill.KV), ("iters", refill.ITERS),
                         ("ev", refill.EV), ("pre", refill.PRE), ("kind", refill.KIND)]:  # fmt: skip
        assert list(getattr(logs, name)) == r.steps[:, column].tolist(), name
    assert logs.adm_generated == r.admits[:, 0].tolist() and logs.adm_finish == r.admits[:, 1].tolist()
    assert len(logs.adm_generated) >= len(r.admitted) == 12
    assert all(type(x) is int for x in [*logs.adm_generated, logs.fin[0], logs.kv[-1]])


def _assert_same_chunked_plan(chunked, whole) -> None:
    """`_assert_same_plan`, but for the admissions a whole plan keeps past its last step (a plan
    that stops inside an admission loop; never read): a plan made in chunks takes only its steps'."""
    assert (chunked is None) == (whole is None)
    if whole is None:
        return
    n = len(whole.admitted)
    a, b = chunked.logs, whole.logs
    assert a.adm_generated[:n] == b.adm_generated[:n] and a.adm_finish[:n] == b.adm_finish[:n]
    a.adm_generated, a.adm_finish = b.adm_generated, b.adm_finish
    _assert_same_plan(chunked, whole)
    assert chunked.pops == whole.pops and chunked.by_steps == whole.by_steps
    assert chunked.row_list == whole.row_list


def _chunked_plans(sc: Scenario, monkeypatch) -> tuple[int, int]:
    """Simulate sc, making every refill on an engine's own queue twice: whole, and in chunks of 2
    steps (`LazyPlan`) then planned on to its end; the two must be equal field by field, wake-ups
    included. Returns (plans made in chunks, chunks planned after the first ones)."""
    plan, first, extend = refill.plan_refill, refill.LazyPlan.first, refill.LazyPlan.extend
    counts = [0, 0]

    def counted_first(self):
        counts[0] += 1
        return first(self)

    def counted_extend(self, r):
        counts[1] += 1
        extend(self, r)

    def both(batch, queued, version, now, costs, cache, lazy=False):
        whole = plan(batch, queued, version, now, costs, cache)
        if lazy:
            with monkeypatch.context() as m:
                m.setattr(refill, "LAZY_STEPS", 2)
                chunked = plan(batch, queued, version, now, costs, cache, True)
            while chunked is not None and chunked.more is not None:
                chunked.more.extend(chunked)
            _assert_same_chunked_plan(chunked, whole)
        return whole

    with monkeypatch.context() as m:
        m.setattr(engine_module, "plan_refill", both)
        m.setattr(refill.LazyPlan, "first", counted_first)
        m.setattr(refill.LazyPlan, "extend", counted_extend)
        simulate(sc)
    return counts[0], counts[1]


@pytest.mark.parametrize("i", range(0, 30, 3))
def test_a_plan_made_in_chunks_is_the_whole_plan(i: int, monkeypatch) -> None:
    """Random queue-bound scenarios (stretches, KV pressure, ties, weights): a plan made 2 steps at
    a time is, once planned to its end, the plan made in one go, its wake-ups included."""
    _chunked_plans(queued_scenario(i), monkeypatch)


def test_a_kv_bound_plan_made_in_chunks_is_the_whole_plan(monkeypatch) -> None:
    """Preemption chains and readmissions across chunk boundaries: the same plans."""
    chunked, extended = _chunked_plans(_kv_pressured(max_batch=256), monkeypatch)
    assert chunked > 0 and extended > 10 * chunked


def _record(result: SimResult) -> tuple:
    """Everything the output is made of that a plan's extent could move: metrics, tracks, running samples."""
    from rlsim.metrics.summary import summarize

    rec = result.recorder
    tracks = {a: (t.states, t.start_s, t.end_s, t.steps, t.versions) for a, t in rec.tracks.items()}
    return summarize(result).model_dump(), tracks, {a: (list(t), list(n)) for a, (t, n) in rec.running_samples.items()}


@pytest.mark.parametrize(
    ("name", "mode"), [("long-cot", "async"), ("long-cot", "one_step_off"), ("kv", "async"), ("kv", "sync")]
)
def test_plans_made_in_chunks_change_no_output_bit(name: str, mode: str, monkeypatch) -> None:
    """Chunks of 2 steps (hundreds of chunks, new weights cutting plans part-way, wake-ups found a
    chunk at a time, the follower's end armed late with its early event id) against whole plans:
    the same metrics, state tracks and running-batch samples, float for float."""
    sc = load_scenario("long-cot", ["steps=3"]) if name == "long-cot" else _kv_pressured(max_batch=256)
    sc = sc.with_mode(mode)
    made = [0]
    first = refill.LazyPlan.first

    def counted(self):
        made[0] += 1
        return first(self)

    with monkeypatch.context() as m:
        m.setattr(refill, "LAZY_STEPS", 1 << 40)
        whole = _record(simulate(sc))
    with monkeypatch.context() as m:
        m.setattr(refill, "LAZY_STEPS", 2)
        m.setattr(refill.LazyPlan, "first", counted)
        chunked = _record(simulate(sc))
    assert made[0] > 0
    assert chunked == whole
