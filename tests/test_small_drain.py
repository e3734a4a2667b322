"""Short drains in plain Python (`drain._small_drain`) against the numpy plan (`plan_drain`).

Under KV pressure most drains are one or two spans to the KV-full boundary, or none (the cache
is full already); those are planned without numpy. The two must make the same drain, field by
field (spans, iterations, cache, tokens, finishers and their order, times bit for bit).
"""

from __future__ import annotations

import dataclasses

import pytest
from random_scenarios import pressured_scenario
from small_scenarios import make

import rlsim.simulator.engine as engine_module
from rlsim.scenario import Scenario, load_scenario
from rlsim.simulator import drain
from rlsim.simulator.run import simulate


def _fields(d: drain.Drain | None):
    """Every field (the sequences by identity), with the type of each value in the lists."""
    if d is None:
        return None
    out = []
    for f in dataclasses.fields(d):
        v = getattr(d, f.name)
        if f.name == "finishers":
            v = [id(seq) for seq in v]
        out.append((f.name, v, [type(x) for x in v] if isinstance(v, list) else type(v)))
    return out


def _same_drains(sc: Scenario, monkeypatch) -> tuple[int, int, int]:
    """Simulate sc, planning every drain in plain Python (whatever its length) and with numpy
    (the cache-full check off too); the two must be equal. Returns (drains planned, of them in
    plain Python at the default limit, None)."""
    plan = drain.plan_drain
    counts = [0, 0, 0]

    def both(costs, running, iters, kv, capacity, now):
        small = None
        if capacity - kv >= len(running):
            small = drain._small_drain(costs, running, list(running.values()), iters, kv, capacity, now)
        with monkeypatch.context() as m:
            m.setattr(drain, "SMALL_DRAIN", 0)  # numpy only
            bulk = plan(costs, running, iters, kv, capacity, now)
        with monkeypatch.context() as m:
            m.setattr(drain, "SMALL_DRAIN", 1 << 30)  # plain Python only
            python = plan(costs, running, iters, kv, capacity, now)
        assert _fields(python) == _fields(bulk)
        if bulk is None:
            counts[2] += 1
        else:
            counts[0] += 1
            counts[1] += small is not None
        return bulk

    with monkeypatch.context() as m:
        m.setattr(engine_module, "plan_drain", both)
        simulate(sc)
    return counts[0], counts[1], counts[2]


def test_a_kv_bound_drain_in_plain_python_is_the_numpy_drain(monkeypatch) -> None:
    """long-cot (KV-bound): drains of none, one and a few spans, stopped by the cache or not."""
    made, small, none = _same_drains(load_scenario("long-cot", ["steps=2"]).with_mode("sync"), monkeypatch)
    assert made > 10 and small > 5 and none > 5


def test_long_drains_in_plain_python_are_the_numpy_drains(monkeypatch) -> None:
    """A batch draining to empty (no KV pressure): long drains, ties in finish iteration."""
    made, small, _ = _same_drains(make({"algorithm": {"prompts_per_step": 16, "group_size": 8}}), monkeypatch)
    assert made > 0


@pytest.mark.parametrize("i", range(0, 30, 6))
def test_drains_on_random_pressured_scenarios_are_the_numpy_drains(i: int, monkeypatch) -> None:
    _same_drains(pressured_scenario(i), monkeypatch)


def test_a_drain_longer_than_the_limit_is_left_to_numpy(monkeypatch) -> None:
    """`_small_drain` declines past SMALL_DRAIN spans (None), and numpy plans the whole drain."""
    seen = []
    small = drain._small_drain

    def spy(*args):
        out = small(*args)
        seen.append(out)
        return out

    monkeypatch.setattr(drain, "SMALL_DRAIN", 2)
    monkeypatch.setattr(drain, "_small_drain", spy)
    lengths = []
    plan = drain.plan_drain

    def recorded(*args):
        d = plan(*args)
        lengths.append(0 if d is None else d.spans)
        return d

    monkeypatch.setattr(engine_module, "plan_drain", recorded)
    simulate(make({"algorithm": {"prompts_per_step": 16, "group_size": 8}}))
    assert any(n > 2 for n in lengths)
    assert all(d is None or d.spans <= 2 for d in seen)
