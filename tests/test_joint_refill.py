"""Joint refills (joint_refill.py): the engines sharing a queue planned together while every batch
is full, against the same engines stepping span by span on that queue, bit for bit.

The oracle, drain and invariant tests run streaming scenarios too (against the reference and the
span-by-span engines); these compare the whole record with the engines that never plan jointly,
on full batches with long queues (where the plan applies), under every interrupt, with 2-8
engines, pull-dispatch async, KV pressure (where it mostly does not), and equal lengths (engines
reaching events at the same times: the plan stops there), and check that the plan was taken.
"""

from __future__ import annotations

import numpy as np
import pytest
from event_count import simulate_counting_events
from small_scenarios import make
from test_shared_refill import _pressured, _record

import rlsim.simulator.engine as engine_module
import rlsim.simulator.joint_refill as joint
from rlsim.models.decode import IterationCost
from rlsim.placement import resolve
from rlsim.scenario import Scenario, load_scenario
from rlsim.simulator.costs import Costs
from rlsim.simulator.run import SimResult


def _slot_bound(engines: int, interrupt: str, mode: str = "streaming", **over) -> Scenario:
    """Engines pulling from one queue that holds more than their full batches (a batch of 8)."""
    workload = {
        "prompt_tokens": {"kind": "lognormal", "mean": 200, "sigma": 0.5, "max": 1024},
        "response_tokens": {"kind": "lognormal", "mean": 300, "sigma": 0.9, "max": 2000},
        "reward": {"kind": "cpu_verifier", "seconds_per_sample": over.pop("verifier_s", 0.01), "workers": 4},
    }
    workload.update(over.pop("workload", {}))
    return make(
        {
            "cluster": {"gpus_per_node": engines + 2},
            "algorithm": {"prompts_per_step": 16, "group_size": 8},
            "workload": workload,
            "pipeline": {
                "mode": mode,
                "inference": {"gpus": engines, "max_batch": 8, "dispatch": "pull", **over.pop("inference", {})},
                "training": {"gpus": 2},
                "weight_sync": {"interrupt": interrupt},
            },
            "steps": over.pop("steps", 4),
        }
    )


def _run(sc: Scenario, monkeypatch, jointly: bool) -> tuple[int, SimResult]:
    patches = () if jointly else ((engine_module, "plans_jointly", lambda engine: False),)
    return simulate_counting_events(sc, monkeypatch, patches)


def _compare(sc: Scenario, monkeypatch) -> tuple[int, int, dict]:
    """(events planned jointly, events without, the plans' tally) after checking the records agree."""
    joint.STATS.clear()
    planned, fast = _run(sc, monkeypatch, jointly=True)
    stats = dict(joint.STATS)
    stepped, slow = _run(sc, monkeypatch, jointly=False)
    assert _record(fast) == _record(slow)
    return planned, stepped, stats


SLOT_BOUND = [  # engines, interrupt, mode, steps
    (2, "in_flight", "streaming", 4),
    (4, "blocking", "streaming", 4),
    (3, "abort_resubmit", "streaming", 4),
    # 8 soft-paused engines plan once in 4 steps since a small layer's GEMMs half-saturate later
    # (decode.tokens_half, 2026-12-07): a fifth step gives the second plan
    (8, "soft_pause", "streaming", 5),
    (5, "abort_discard", "streaming", 4),
    (4, "in_flight", "async", 4),
    (2, "blocking", "async", 4),
]


@pytest.mark.parametrize("case", SLOT_BOUND)
def test_a_joint_plan_changes_nothing_on_full_batches(case: tuple, monkeypatch) -> None:
    """Full batches, a long shared queue: planned together, the same record in far fewer events."""
    engines, interrupt, mode, steps = case
    planned, stepped, stats = _compare(_slot_bound(engines, interrupt, mode, steps=steps), monkeypatch)
    assert stats.get("planned", 0) >= 2
    assert planned < 0.8 * stepped


def test_engines_reaching_an_event_together_stop_the_plan(monkeypatch) -> None:
    """Equal prompts and responses: the engines finish and admit at the same times, where SimPy's
    event order decides who takes the head; the plan stops there and nothing changes."""
    equal = {
        "prompt_tokens": {"kind": "constant", "value": 128},
        "response_tokens": {"kind": "constant", "value": 200},
    }
    _, _, stats = _compare(_slot_bound(4, "in_flight", workload=equal, steps=3), monkeypatch)
    assert stats.get("a tie", 0) + stats.get("short", 0) > 0  # refused at ties, or stopped at once


def test_a_joint_plan_without_verifier_time(monkeypatch) -> None:
    """No verifier time: a group completes as its last member finishes (the flush lands there)."""
    _, _, stats = _compare(_slot_bound(3, "in_flight", verifier_s=0.0), monkeypatch)
    assert stats.get("planned", 0) >= 2


@pytest.mark.parametrize("engines", [2, 6])
def test_kv_pressure_falls_back_and_changes_nothing(engines: int, monkeypatch) -> None:
    """A cache that holds a fraction of the batch: where it binds the engines step (or plan alone)."""
    _, _, stats = _compare(_pressured(engines, "in_flight", 0.05, 0.3, 4000, 3), monkeypatch)
    assert sum(stats.values()) > 0  # it was asked, and refused where the cache binds


def test_orders_past_a_parts_heap_key_refuse_the_plan_and_change_nothing(monkeypatch) -> None:
    """A part keys its finish heap by (finish << 32) | admission order: an engine whose orders,
    plus what a plan may admit (its snapshot of the queue), could pass the key's low bits plans
    no more. Here the low bits are 7 (orders to 127) and a plan sees 16 queued sequences: the
    first plans are made (and exact), the later ones refused, and the record is unchanged."""
    monkeypatch.setattr(joint, "_ORDER", 2**7 - 1)
    monkeypatch.setattr(joint, "SNAPSHOT_ITEMS", 16)
    _, _, stats = _compare(_slot_bound(2, "in_flight"), monkeypatch)
    assert stats.get("planned", 0) >= 1 and stats.get("orders past a heap key", 0) >= 1


def test_the_memory_line_span_is_span_s_bit_for_bit() -> None:
    """`line_span_s` (the plan's inline `span_s` where the memory line wins) equals `span_s`."""
    rng = np.random.default_rng(0)
    costs = Costs(resolve(load_scenario("default")))
    checked = 0
    for b in (1, 7, 64, 256):
        cost = costs.iteration(b)
        line = joint.memory_line(cost)
        assert line is not None  # the default's decode: no launch floor, memory-bound
        for kv, k in zip(rng.integers(0, 2_000_000, 500).tolist(), rng.integers(1, 20_000, 500).tolist()):
            d = joint.line_span_s(line, kv, k)
            if d is not None:
                assert d == cost.span_s(kv, k)
                checked += 1
    assert checked > 1000
    floored = IterationCost(8, 1e-3, 1e-4, 1e-9, 2e-4, 1e-9, floor_s=5e-3)
    assert joint.memory_line(floored) is None  # a launch floor: span_s itself


def test_the_default_example_streaming_changes_nothing(monkeypatch) -> None:
    """The default example in streaming: joint plans, then drains at each step's tail that keep the
    finish heap a plan leaves (a drain's cut iteration pops its stale entries, which the ledger's
    flush there shows), and partial batches in between."""
    sc = load_scenario("default", ["steps=6"]).with_mode("streaming")
    _, _, stats = _compare(sc, monkeypatch)
    assert stats.get("planned", 0) >= 1
