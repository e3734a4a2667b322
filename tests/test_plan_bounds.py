"""The planner's lower bound (`rlsim.planner.bounds`) against the simulator on many random
scenarios: every mode, interrupt, staleness policy and dispatch, KV-pressured and queued engines.

The bounded search is only exact if no bound ever exceeds what simulating reports, so this
draws scenarios far from the examples (tests/random_scenarios.py) and checks run seconds and
mean staleness, over a run longer than the simulation and one of its own length.
"""

from __future__ import annotations

import pytest
from random_scenarios import outcome, pressured_scenario, queued_scenario, random_scenario

from rlsim.planner.bounds import BatchDraws, run_bound
from rlsim.planner.costing import project_samples, sample_fractions, sample_scenarios
from rlsim.scenario import Mode, scenario_from_dict

RUN_STEPS = (3, 40)  # no longer than most simulations (the average step), and longer (steady steps)


def _simulated(sc, run_steps: int) -> tuple[float, float]:
    """(projected run seconds, mean staleness) as the planner's `_evaluate` computes them."""
    proj, metrics = project_samples(sample_scenarios(sc, 2), run_steps)
    samples = [m.rollouts_per_s * m.wall_time_s for m in metrics]
    stale = sum(m.staleness_mean * n for m, n in zip(metrics, samples, strict=True)) / sum(samples)
    return proj.wall_time_s, stale


def _check(sc) -> None:
    draws = BatchDraws()
    for run_steps in RUN_STEPS:
        b = run_bound(sc, sample_fractions(sc, 2), run_steps, draws, fill_steps=sc.pipeline.depth + 1)
        wall_s, stale = _simulated(sc, run_steps)
        assert 0 < b.wall_s <= wall_s, (sc.pipeline.mode.value, run_steps, b.wall_s, wall_s)
        assert b.staleness_mean <= stale + 1e-12, (sc.pipeline.mode.value, b.staleness_mean, stale)


@pytest.mark.parametrize("i", range(40))
def test_bound_never_exceeds_the_simulation_on_random_scenarios(i):
    _check(random_scenario(i))


@pytest.mark.parametrize("i", range(30))
def test_bound_never_exceeds_the_simulation_under_kv_pressure(i):
    """A small KV cache (admission waits for room, the newest sequence is preempted)."""
    _check(pressured_scenario(i))


@pytest.mark.parametrize("i", range(30))
def test_bound_never_exceeds_the_simulation_with_queued_engines(i):
    """More work queued than the engines admit: small batches or a small cache."""
    _check(queued_scenario(i))


def _streamed(sc):
    """The scenario with each group its own minibatch, trained as soon as it is complete."""
    data = sc.model_dump(mode="json")
    data["pipeline"]["training"]["stream_minibatches"] = True
    data["algorithm"]["minibatches"] = data["algorithm"]["prompts_per_step"]
    return scenario_from_dict(data, base_dir=sc.base_dir)


@pytest.mark.parametrize("make", [random_scenario, pressured_scenario, queued_scenario])
def test_bound_never_exceeds_the_simulation_with_streamed_minibatches(make):
    """A step trains the first complete groups of any batch, each minibatch as it comes: neither
    the step's samples nor its wait for batch s are known (the bound was up to 40 % over, and its
    'exact' staleness above the simulated, before it said so)."""
    for i in range(1, 40, 3):
        sc = make(i)
        if sc.pipeline.mode is not Mode.colocated:
            _check(_streamed(sc))


@pytest.mark.parametrize(
    "make,i",
    [(random_scenario, 7), (random_scenario, 12), (pressured_scenario, 8), (pressured_scenario, 38)],
)
def test_samples_admitted_before_the_first_decode_start_on_version_zero(make, i):
    """`bounds._started_on_first_weights`: samples of batches 1 .. depth that an engine admits
    before it decodes at all are at least their batch number stale; this raises the staleness
    floor above the sync interval's remainder, and stays at most the simulated staleness."""
    from rlsim.placement import resolve
    from rlsim.planner.bounds import _started_on_first_weights, least_lags, staleness_floor
    from rlsim.simulator.costs import Costs

    sc = make(i)
    costs = Costs(resolve(sc))
    batches = BatchDraws().batches(sc, None, sc.steps)
    early = _started_on_first_weights(sc, costs, batches)
    assert sum(early[1:]) > 0
    floor = staleness_floor(sc, costs, batches)
    assert sum(least_lags(sc)) / sc.steps < floor <= _simulated(sc, sc.steps)[1] + 1e-12


class _Looker:
    """A watch that never stops the run: it looks every `every` seconds and keeps the planner
    watch's bound (`rlsim.planner.watch.Watch.bound_at`) at each look, staleness always counted."""

    def __init__(self, sc, run_steps: int, every: float):
        from rlsim.planner.search import Bound
        from rlsim.planner.watch import Settle, Watch

        draws = BatchDraws()
        b = run_bound(sc, [0.0], run_steps, draws, fill_steps=sc.pipeline.depth + 1)
        static = Bound(b.wall_s / 3600.0, b.wall_s / 3600.0, b.staleness_mean, b.sim_s, 1.0)
        self.watch = Watch(sc, static, run_steps, Settle((), None, None, "cost"))
        self.watch._could_dominate = lambda hours: True
        self.every, self.bounds = every, []

    def __call__(self, w):
        self.bounds.append((w.env.now, self.watch.bound_at(w)))
        return w.env.now + self.every


def _check_watched(sc) -> int:
    """Watched and unwatched runs are the same run; every look's bound is at most the simulated
    result (run hours and mean staleness); returns how many looks raised a bound above the static one."""
    from rlsim.simulator.run import simulate

    plain = simulate(sc)
    raised = 0
    for run_steps in RUN_STEPS:
        wall_s, stale = _simulated(sc, run_steps)
        looker = _Looker(sc, run_steps, max(plain.recorder.end_s / 23.0, 1e-6))
        watched = simulate(sc, watch=looker)
        assert outcome(watched) == outcome(plain) and watched.recorder.end_s == plain.recorder.end_s
        assert [s.end_s for s in watched.recorder.steps] == [s.end_s for s in plain.recorder.steps]
        first = looker.bounds[0][1]
        for t, b in looker.bounds:
            assert b.hours * 3600.0 <= wall_s, (sc.pipeline.mode.value, run_steps, t, b.hours * 3600, wall_s)
            assert b.staleness_mean <= stale + 1e-12, (sc.pipeline.mode.value, t, b.staleness_mean, stale)
            raised += b.hours > first.hours or b.staleness_mean > first.staleness_mean
    return raised


@pytest.mark.parametrize("make", [random_scenario, pressured_scenario, queued_scenario])
def test_watched_bound_never_exceeds_the_simulation(make):
    """`rlsim.planner.watch`: the bound from a simulation under way, at 23+ looks over the run, is
    at most the finished run's hours and staleness (every mode, KV-pressured and queued engines,
    streamed minibatches), and looking changes nothing in the run; the looks do raise it."""
    raised = 0
    for i in range(0, 40, 2):
        sc = make(i)
        raised += _check_watched(sc)
        if sc.pipeline.mode is not Mode.colocated and i % 4 == 0:
            raised += _check_watched(_streamed(sc))
    assert raised > 0
