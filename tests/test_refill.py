"""Refills (an engine planning admissions, prefills and preemptions while its queue waits for
room) against the span-by-span engine, and proof that the planned path is the one taken.

The oracle, drain and invariant tests run the queue-bound scenarios too; these tests add what
only a refill has: a plan that stops where the queue it saw ends, and far fewer events.
"""

from __future__ import annotations

import math

import pytest
import simpy
from random_scenarios import outcome, queued_scenario
from small_scenarios import make

import rlsim.simulator.refill as refill
from rlsim.scenario import Scenario
from rlsim.simulator.engine import Engine
from rlsim.simulator.run import SimResult, simulate


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


def _events(sc: Scenario, monkeypatch, drains: bool) -> tuple[int, SimResult]:
    """SimPy events processed by a simulation of sc (with or without planning ahead)."""
    count = [0]
    step = simpy.Environment.step

    def counting(env):
        count[0] += 1
        return step(env)

    with monkeypatch.context() as m:
        m.setattr(simpy.Environment, "step", counting)
        m.setattr(Engine, "drains", drains)
        result = simulate(sc)
    return count[0], result


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
    sc = make(
        {
            "model": "qwen2.5-7b",
            "cluster": {"gpus_per_node": 3},
            "algorithm": {"prompts_per_step": 16, "group_size": 8},
            "workload": {"response_tokens": {"kind": "lognormal", "mean": 2000, "sigma": 0.9, "max": 6000}},
            "pipeline": {
                "inference": {"gpus": 1, "max_batch": 256, "kv_memory_fraction": 0.23},
                "training": {"gpus": 2, "micro_batch_tokens": 16384},
            },
        }
    )
    planned, fast = _events(sc, monkeypatch, drains=True)
    stepped, slow = _events(sc, monkeypatch, drains=False)
    assert fast.recorder.preemptions > 0
    assert outcome(fast) == outcome(slow)
    assert math.isclose(fast.recorder.end_s, slow.recorder.end_s, rel_tol=1e-12)
    assert planned < stepped / 5
