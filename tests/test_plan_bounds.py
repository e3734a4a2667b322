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
from rlsim.scenario import Dispatch, Interrupt, Mode, scenario_from_dict

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
        static = Bound(b.wall_s / 3600.0, b.wall_s / 3600.0, b.staleness_mean, b.sim_s, 1.0, b.tail_s)
        self.watch = Watch(sc, static, run_steps, Settle((), None, None, "cost"))
        self.watch._could_dominate = lambda hours: True
        self.alone = Watch(sc, static, run_steps, Settle((), None, None, "cost"))  # without each engine's work
        self.alone.engines = None
        self.every, self.bounds, self.by_engine = every, [], 0

    def __call__(self, w):
        b = self.watch.bound_at(w)
        self.bounds.append((w.env.now, b))
        self.by_engine += b.hours > self.alone.bound_at(w).hours  # the engines' own work raised it
        return w.env.now + self.every


def _check_watched(sc) -> tuple[int, int]:
    """Watched and unwatched runs are the same run; every look's bound is at most the simulated
    result (run hours and mean staleness); returns how many looks raised a bound above the static
    one, and how many of them the engines' own work (`watch._Assigned`) raised further."""
    from rlsim.simulator.run import simulate

    plain = simulate(sc)
    raised = by_engine = 0
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
        by_engine += looker.by_engine
    return raised, by_engine


@pytest.mark.parametrize("make", [random_scenario, pressured_scenario, queued_scenario])
def test_watched_bound_never_exceeds_the_simulation(make):
    """`rlsim.planner.watch`: the bound from a simulation under way, at 23+ looks over the run, is
    at most the finished run's hours and staleness (every mode, KV-pressured and queued engines,
    streamed minibatches), and looking changes nothing in the run; the looks do raise it, and
    each engine's own work raises it further at some."""
    raised = by_engine = 0
    for i in range(0, 40, 2):
        sc = make(i)
        looks = [_check_watched(sc)]
        if sc.pipeline.mode is not Mode.colocated and i % 4 == 0:
            looks.append(_check_watched(_streamed(sc)))
        raised += sum(r for r, _ in looks)
        by_engine += sum(e for _, e in looks)
    print(make.__name__, raised, by_engine)
    assert raised > 0 and by_engine > 0


def test_each_engine_decodes_what_it_admitted():
    """`watch._Assigned`: a sequence stays on the engine that admitted it, so the engines have
    decoded everything no earlier than, for some engine and release floor tau, tau + the decode
    floor of that engine's sequences released at tau or later. Here each iteration costs 1 s
    (the floor counts iterations), 2 sequences fit an iteration and 100 cached tokens."""
    from types import SimpleNamespace as NS

    from rlsim.planner.bounds import DecodeFloor
    from rlsim.planner.watch import _Assigned

    floor = DecodeFloor.__new__(DecodeFloor)
    floor.fixed, floor.mem0, floor.mem_share, floor.comp_share, floor.mem_k, floor.comp_k = 1.0, 0.0, 0.0, 0.0, 0.0, 0.0
    floor.max_batch, floor.capacity, floor.engines = 2, 100, 2
    a, b = object(), object()

    def group(*seqs):
        return NS(sequences=[NS(engine=e, prompt_tokens=10, response_tokens=r) for e, r in seqs])

    sc = random_scenario(0)
    assigned = _Assigned(sc)
    assigned._floor = floor
    groups = [group((a, 5), (a, 3)), group((b, 2), (None, 9))]
    world = NS(dispatcher=NS(groups=groups), env=NS(now=0.0))
    assigned.look(world)  # released at time 0 or later
    # engine a: 4 + 2 decode steps, 4*10 + 6 + 2*10 + 1 = 67 cached tokens: max(6 / 2, 67 / 100, 4) = 4
    assert assigned.decoded_s(world) == 4.0
    world.env.now = 10.0
    assigned.look(world)  # nothing new
    groups.append(group((a, 3)))  # released after the look at t = 10
    groups[1].sequences[1].engine = b  # admitted now: 8 steps on engine b, from time 0
    world.env.now = 11.0
    assigned.look(world)
    # engine a: from tau 0, 8 steps over 88 cached tokens: max(8 / 2, 0.88, 4) = 4; from tau 10, its
    # last sequence: 10 + max(2 / 2, 0.21, 2) = 12. Engine b: 9 steps, 118 tokens: max(4.5, 1.18, 8) = 8
    assert assigned.decoded_s(world) == 12.0

    def pulled(interrupt):
        pipe = sc.pipeline
        sync = pipe.weight_sync.model_copy(update={"interrupt": interrupt})
        inference = pipe.inference.model_copy(update={"dispatch": Dispatch.pull})
        return sc.model_copy(update={"pipeline": pipe.model_copy(update={"inference": inference, "weight_sync": sync})})

    assert not _Assigned(pulled(Interrupt.abort_resubmit)).sticky  # an abort sends them back to the shared queue
    assert _Assigned(pulled(Interrupt.in_flight)).sticky
