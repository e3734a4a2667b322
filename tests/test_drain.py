"""Drains (an engine planning finish to finish in one go) against the span-by-span engine.

A drain must not change the simulation: its spans' durations are the scalar closed form
vectorised, its end times the same running sums, and its finishes reach the reward pool in the
same first-come-first-served order across engines (through the ledger). The span-by-span engine
is `Engine` with `drains = False`.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import simpy
from random_scenarios import (
    agent_scenario,
    outcome,
    partial_scenario,
    pressured_scenario,
    queued_scenario,
    random_scenario,
)
from simpy.core import URGENT
from small_scenarios import make

from rlsim.models.decode import IterationCost, spans_s
from rlsim.scenario import Mode, builtin_scenarios, load_scenario
from rlsim.simulator.engine import Engine
from rlsim.simulator.finishes import delay_until, schedule_at, timeout_at
from rlsim.simulator.reward import RewardPool
from rlsim.simulator.run import simulate
from rlsim.simulator.work import Group, new_sequences


def _random_costs(rng: np.random.Generator, n: int) -> list[IterationCost]:
    """Iteration costs where either line may win first, and the other may overtake it."""
    return [
        IterationCost(
            batch=int(rng.integers(1, 300)),
            fixed_s=float(rng.uniform(0, 2e-3)),
            mem0_s=float(rng.uniform(0, 1e-2)),
            mem_per_token_s=float(rng.choice([0.0, rng.uniform(0, 1e-7)])),
            comp0_s=float(rng.choice([0.0, rng.uniform(0, 1e-2)])),
            comp_per_token_s=float(rng.choice([0.0, rng.uniform(0, 1e-7)])),
            floor_s=float(rng.choice([0.0, rng.uniform(0, 3e-2)])),
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize("seed", range(20))
def test_spans_s_is_span_s_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    costs = _random_costs(rng, 200)
    kv0 = rng.integers(0, 2_000_000, 200)
    k = rng.integers(1, 20_000, 200)
    rows = np.array([(c.fixed_s, c.mem0_s, c.mem_per_token_s, c.comp0_s, c.comp_per_token_s, c.floor_s) for c in costs])
    batch = np.array([c.batch for c in costs])
    got = spans_s(rows, batch, kv0, k).tolist()
    want = [c.span_s(int(a), int(b)) for c, a, b in zip(costs, kv0, k)]
    assert got == want


def test_spans_s_fast_path_is_exact() -> None:
    """Memory-bound everywhere (the common case) takes the short path; still bit for bit."""
    c = IterationCost(batch=64, fixed_s=1e-3, mem0_s=8e-3, mem_per_token_s=5e-9, comp0_s=1e-3, comp_per_token_s=1e-9)
    kv0, k = np.array([0, 123_456, 999_999]), np.array([1, 77, 16_000])
    rows = np.tile((c.fixed_s, c.mem0_s, c.mem_per_token_s, c.comp0_s, c.comp_per_token_s, c.floor_s), (3, 1))
    assert spans_s(rows, np.full(3, 64), kv0, k).tolist() == [c.span_s(int(a), int(b)) for a, b in zip(kv0, k)]


@pytest.mark.parametrize("seed", range(5))
def test_span_with_a_launch_floor_is_the_sum_of_its_iterations(seed: int) -> None:
    """An eager engine's floor holds until a line reaches it: the closed form equals the plain sum."""
    rng = np.random.default_rng(100 + seed)
    for c in _random_costs(rng, 40):
        c = IterationCost(**{**c.__dict__, "floor_s": float(rng.uniform(1e-3, 3e-2))})
        kv0, k = int(rng.integers(0, 500_000)), int(rng.integers(1, 3_000))
        plain = sum(c.at(kv0 + j * c.batch) for j in range(k))
        assert c.span_s(kv0, k) == pytest.approx(plain, rel=1e-9)


def test_delay_until_lands_exactly() -> None:
    rnd = random.Random(7)
    for _ in range(20_000):
        now = rnd.uniform(0, 5000)
        t = now + rnd.expovariate(1.0) * rnd.choice([1e-9, 1e-4, 1.0, 1e3])
        d = delay_until(now, t)
        assert d >= 0 and now + d == t  # when t is within reach of now (below: when it is not)
    assert delay_until(3.0, 3.0) == 0.0


def test_an_event_lands_on_a_time_no_delay_reaches() -> None:
    """A plan armed at 2.85 s for its end at 174.6978685070164 s (a streaming run's refill): now + d
    rounds to every other float there, so no delay gives that end; the event still fires on it."""
    now, t = 2.849703328981903, 174.6978685070164
    d = delay_until(now, t)
    assert now + d != t  # the case: SimPy's now + delay cannot land on t
    env = simpy.Environment()
    seen = []

    def proc():
        yield env.timeout(now)
        value = yield timeout_at(env, t, "done")
        seen.append((env.now, value))
        yield timeout_at(env, env.now + 1.0)  # the common case: an ordinary timeout
        seen.append(env.now)

    env.process(proc())
    env.run()
    assert seen == [(t, "done"), t + 1.0]


def test_an_urgent_event_lands_on_its_time_before_others_due_then() -> None:
    """The planner's watch pauses the run at the time it names (`run._advance`), before anything
    else due then: `schedule_at` lands there exactly, where `env.schedule(e, URGENT, t - now)`
    fires an ulp off t (here an ulp early: the watch would look before the world reached t)."""
    now, t = 2.849703328981903, 174.6978685070164
    assert now + (t - now) != t  # the old delay misses t
    env = simpy.Environment()
    seen = []

    def proc():
        yield env.timeout(now)
        due = timeout_at(env, t)  # an ordinary event due at t, scheduled first
        due.callbacks.append(lambda _: seen.append(("due", env.now)))
        pause = env.event()
        pause._ok, pause._value = True, None
        schedule_at(env, pause, t, URGENT)
        pause.callbacks.append(lambda _: seen.append(("pause", env.now)))

    env.process(proc())
    env.run()
    assert seen == [("pause", t), ("due", t)]


def test_a_scored_group_reaches_the_buffer_at_its_done_at() -> None:
    """The reward pool hands a group on at its last score's time exactly, whatever the clock when
    its last finish is submitted (a planned engine submits later than a span-by-span one): from
    0.466 s, a score ending at 1.51435799954466 + 0.1 = 1.6143579995446602 s is not reached by
    `env.timeout(done - now)`, which fires at 1.61435799954466 s (queued_scenario(2) seen once)."""
    now, finish, seconds = 0.46594473627330457, 1.51435799954466, 0.1
    done = finish + seconds  # one free verifier: the sample starts at its finish
    assert now + (done - now) != done  # the case
    env = simpy.Environment()
    arrivals = []

    class Buffer:
        def put(self, group) -> None:
            arrivals.append((env.now, group))

    pool = RewardPool(env, Buffer(), seconds_per_sample=seconds, workers=1)
    group = Group(gid=0, batch=0, min_version=0, prompt_tokens=1)
    group.sequences = new_sequences(group, 1, [1])
    group.size = 1
    group.sequences[0].finish_s = finish
    env.run(until=now)
    pool.submit(group.sequences)
    env.run()
    assert arrivals == [(done, group)]


def _span_by_span(sc, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(Engine, "drains", False)
        return simulate(sc)


_KINDS = {
    "random": random_scenario,
    "pressured": pressured_scenario,
    "queued": queued_scenario,
    "partial": partial_scenario,
    "agent": agent_scenario,
}


@pytest.mark.parametrize(
    "i",
    [f"random-{i}" for i in range(60)]
    + [f"pressured-{i}" for i in range(25)]
    + [f"queued-{i}" for i in range(30)]
    + [f"partial-{i}" for i in range(30)]
    + [f"agent-{i}" for i in range(36)],
)
def test_drains_change_nothing(i: str, monkeypatch) -> None:
    """Every mode, interrupt, policy and dispatch: same tokens, lags and times (to rounding).
    The span-by-span engine plans neither drains nor refills."""
    kind, n = i.split("-")
    sc = _KINDS[kind](int(n))
    with monkeypatch.context() as m:
        m.setattr(Engine, "plans_with_tool_calls", True)  # agent scenarios plan too (not by default)
        fast = simulate(sc)
    spans = _span_by_span(sc, monkeypatch)
    assert outcome(fast) == outcome(spans)
    for a, b in zip(fast.recorder.steps, spans.recorder.steps):
        assert math.isclose(a.start_s, b.start_s, rel_tol=1e-9)
        assert math.isclose(a.end_s, b.end_s, rel_tol=1e-9)


@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
@pytest.mark.parametrize("mode", [m.value for m in Mode])
def test_drains_change_nothing_on_the_examples(name: str, mode: str, monkeypatch) -> None:
    """Full-size batches, KV pressure and shared queues (the random scenarios are small)."""
    sc = load_scenario(name, ["steps=4"])
    if mode == "colocated" and sc.pipeline.inference.gpu not in (None, sc.cluster.gpu):
        pytest.skip("pools of different GPU types cannot share GPUs (colocated is refused)")
    sc = sc.with_mode(mode)
    fast, spans = simulate(sc), _span_by_span(sc, monkeypatch)
    assert outcome(fast) == outcome(spans)
    assert math.isclose(fast.recorder.end_s, spans.recorder.end_s, rel_tol=1e-9)


def test_busy_verifiers_see_finishes_in_time_order(monkeypatch) -> None:
    """One slow verifier shared by four engines: each group's score time depends on every
    finish before it, on every engine, so any misordering by the ledger would show."""
    sc = make(
        {
            "cluster": {"gpus_per_node": 8},
            "pipeline": {"mode": "async", "inference": {"gpus": 4, "max_batch": 64}, "training": {"gpus": 4}},
            "algorithm": {"prompts_per_step": 8, "group_size": 4},
            "workload": {"reward": {"kind": "cpu_verifier", "seconds_per_sample": 0.02, "workers": 1}},
        }
    )
    fast, spans = simulate(sc), _span_by_span(sc, monkeypatch)
    assert [s.start_s for s in fast.recorder.steps] == [s.start_s for s in spans.recorder.steps]
    assert fast.recorder.end_s == spans.recorder.end_s


def test_plans_are_exact_across_the_cuda_graph_capture_size(monkeypatch) -> None:
    """Batches above `cuda_graph_max_tokens` take the eager floor, those below do not: a drain
    and the refills that cross 512 sequences stay the span-by-span engine's, bit for bit."""
    over = {
        "algorithm": {"prompts_per_step": 200, "group_size": 8},
        "pipeline": {"inference": {"max_batch": 700}},
    }
    sc = make(over)
    fast, spans = simulate(sc), _span_by_span(sc, monkeypatch)
    assert outcome(fast) == outcome(spans)
    assert fast.recorder.end_s == spans.recorder.end_s
    graphed = simulate(make(over, ["pipeline.inference.cuda_graph_max_tokens=null"]))
    assert graphed.recorder.end_s < fast.recorder.end_s  # above 512 the floor binds (a 0.5B model)
