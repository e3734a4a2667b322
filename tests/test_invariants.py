"""The design's invariants on every example and on randomized scenarios.

- every GPU's state seconds sum to the wall time (relative 1e-9);
- tokens generated = trained + dropped + filtered + in flight (counted independently);
- staleness <= max_lag wherever rejection is on;
- the rollout buffer never holds more than its capacity;
- the same scenario and seed give byte-identical JSON.
"""

from __future__ import annotations

import json

import pytest
from random_scenarios import (
    agent_scenario,
    engine_scored_scenario,
    filtering_scenario,
    partial_scenario,
    pooled_scenario,
    pressured_scenario,
    queued_scenario,
    quota_scenario,
    random_scenario,
)
from typer.testing import CliRunner

from rlsim.cli import app
from rlsim.metrics.summary import summarize
from rlsim.scenario import Mode, StalenessPolicy, builtin_scenarios, load_scenario
from rlsim.simulator.run import SimResult, simulate


def check_invariants(result: SimResult) -> None:
    rec, sc = result.recorder, result.scenario
    wall = rec.end_s
    for gpu in rec.gpu_actors:
        timeline = rec.gpu_timeline(gpu)
        total = sum(iv.end_s - iv.start_s for iv in timeline)
        assert total == pytest.approx(wall, rel=1e-9), f"GPU {gpu}"
        assert timeline[0].start_s == 0.0 and timeline[-1].end_s == wall
        assert all(a.end_s == b.start_s for a, b in zip(timeline, timeline[1:]))
    trained = sum(s.response_tokens for s in rec.steps)
    filtered = rec.filtering.filtered_tokens if rec.filtering else 0
    wasted = rec.dropped_tokens + rec.discarded_tokens + filtered
    assert rec.generated_tokens == trained + wasted + result.in_flight_tokens
    if sc.algorithm.filter_groups is None:
        assert rec.filtering is None
    else:  # filtering never leaves a step short of B groups, nor gives it more
        assert all(s.groups == sc.algorithm.prompts_per_step for s in rec.steps)
    if sc.pipeline.staleness.policy is StalenessPolicy.reject:
        assert max(s.lag_max for s in rec.steps) <= sc.pipeline.staleness.max_lag
    m = summarize(result)
    assert m.buffer_max_groups <= m.buffer_capacity_groups
    assert len(rec.steps) == sc.steps


@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
@pytest.mark.parametrize("mode", [m.value for m in Mode])
def test_examples_keep_invariants(name: str, mode: str) -> None:
    sc = load_scenario(name, ["steps=3", "algorithm.prompts_per_step=16"])
    if mode == "colocated" and sc.pipeline.inference.gpu not in (None, sc.cluster.gpu):
        pytest.skip("pools of different GPU types cannot share GPUs (colocated is refused)")
    check_invariants(simulate(sc.with_mode(mode)))


@pytest.mark.parametrize("i", range(40))
def test_random_scenarios_keep_invariants(i: int) -> None:
    check_invariants(simulate(random_scenario(i)))


@pytest.mark.parametrize("i", range(40))
def test_filtering_scenarios_keep_invariants(i: int) -> None:
    check_invariants(simulate(filtering_scenario(i)))


@pytest.mark.parametrize("i", range(20))
def test_release_quota_scenarios_keep_invariants(i: int) -> None:
    check_invariants(simulate(quota_scenario(i)))


@pytest.mark.parametrize("i", range(25))
def test_pressured_scenarios_keep_invariants(i: int) -> None:
    check_invariants(simulate(pressured_scenario(i)))


@pytest.mark.parametrize("i", range(30))
def test_queued_scenarios_keep_invariants(i: int) -> None:
    check_invariants(simulate(queued_scenario(i)))


@pytest.mark.parametrize("i", range(30))
def test_pooled_scenarios_keep_invariants(i: int) -> None:
    """A GPU reward model (its own pool, the trainer's GPUs or the inference engines') and mixed GPU
    types: every GPU of every pool still tiles the wall time, and the pools' metrics cover every GPU."""
    result = simulate(pooled_scenario(i))
    check_invariants(result)
    m = summarize(result)
    assert [p.pool for p in m.pools] == [p.name for p in result.resolved.pools]
    for p in m.pools:
        assert sum(p.gpu_seconds_by_state.values()) == pytest.approx(p.gpus * m.wall_time_s, rel=1e-9)
    on_engines = result.scenario.pipeline.reward_model.placement == "with_inference"
    scoring = m.pool("inference" if on_engines else "reward")  # with_inference: the engines score, no pool of its own
    assert scoring.gpu_seconds_by_state["score"] > 0
    assert ("reward" in [p.pool for p in m.pools]) is not on_engines


@pytest.mark.parametrize("i", range(30))
def test_engine_scored_scenarios_keep_invariants(i: int) -> None:
    """A reward model on the inference engines' GPUs over every other stage: the engines' time,
    scoring included, tiles the wall time; tokens add up; no pool of its own."""
    result = simulate(engine_scored_scenario(i))
    check_invariants(result)
    m = summarize(result)
    assert [p.pool for p in m.pools] == ["inference", "training"]
    for p in m.pools:
        assert sum(p.gpu_seconds_by_state.values()) == pytest.approx(p.gpus * m.wall_time_s, rel=1e-9)
    assert m.pool("inference").gpu_seconds_by_state["score"] > 0


@pytest.mark.parametrize("i", range(45))
def test_partial_rollout_scenarios_keep_invariants(i: int) -> None:
    """Carried sequences keep their tokens: generated = trained + dropped + in flight still holds,
    every step trains exactly B groups, one carry per step, and what is carried is trained later."""
    result = simulate(partial_scenario(i))
    check_invariants(result)
    rec, b = result.recorder, result.scenario.algorithm.prompts_per_step
    assert all(s.groups == b for s in rec.steps)
    assert [c.step for c in rec.carries] == list(range(len(rec.steps)))
    assert all(c.token_lag_max >= 1 for c in rec.carries if c.trained_carried)


def test_rejection_drops_and_bounds_staleness() -> None:
    sc = load_scenario(
        "default",
        [
            "steps=6",
            "algorithm.prompts_per_step=16",
            "pipeline.mode=streaming",
            "pipeline.buffer_depth=3",
            "pipeline.staleness.policy=reject",
            "pipeline.staleness.max_lag=1",
        ],
    )
    result = simulate(sc)
    check_invariants(result)
    assert result.recorder.dropped_tokens > 0
    bounded = simulate(
        load_scenario(
            "default",
            ["steps=6", "algorithm.prompts_per_step=16", "pipeline.mode=streaming", "pipeline.buffer_depth=3"],
        )
    )
    assert bounded.recorder.dropped_tokens == 0
    assert max(s.lag_max for s in bounded.recorder.steps) > 1


def test_same_seed_gives_identical_json(tmp_path) -> None:
    runner = CliRunner()
    outs = []
    for i in range(2):
        path = tmp_path / f"run{i}.json"
        res = runner.invoke(
            app, ["simulate", "--steps", "3", "--set", "algorithm.prompts_per_step=8", "--json", str(path)]
        )
        assert res.exit_code == 0, res.output
        outs.append(path.read_bytes())
    assert outs[0] == outs[1]
    other = tmp_path / "seed1.json"
    runner.invoke(
        app, ["simulate", "--steps", "3", "--set", "algorithm.prompts_per_step=8", "--seed", "1", "--json", str(other)]
    )
    assert json.loads(other.read_bytes()) != json.loads(outs[0])


@pytest.mark.parametrize("i", range(36))
def test_agent_scenarios_keep_invariants(i: int) -> None:
    """Multi-turn episodes: tokens of every turn count (generated = trained + dropped +
    discarded + in flight, a turn waiting on its tool call included); GPU time tiles the wall."""
    check_invariants(simulate(agent_scenario(i)))
