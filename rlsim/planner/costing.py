"""Run-level cost of one scenario at every catalog price (`rlsim cost`).

A simulation covers `scenario.steps` steps; a run has `run_steps`. Without a length schedule the
scenario is simulated once and projected (`rlsim.metrics.cost.project_points`: the simulated
fill, then steady steps, when the simulation is long enough to measure them). With one,
response lengths grow over the run, so the scenario is simulated at `points` evenly spaced
fractions of the run, each at the constant mean length of that fraction, and step time, idle
time and tokens are integrated over the run (trapezoid).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from rlsim.catalog.gpus import get_gpu
from rlsim.catalog.lookup import unknown_name
from rlsim.catalog.prices import load_prices
from rlsim.errors import ScenarioError
from rlsim.metrics.cost import CostLine, RunProjection, cost_lines, project_points, rows_for_gpu
from rlsim.metrics.summary import RunMetrics
from rlsim.notices import staleness_warning, warn
from rlsim.planner.executors import Executor, LocalExecutor, simulate_metrics
from rlsim.pools import mixed_gpu_types, pool_layout
from rlsim.scenario import Scenario, scenario_from_dict

SCHEDULE_POINTS = 5
DEFAULT_RUN_STEPS = 1000  # a short RL run; used, with a warning, when neither scenario nor option says


def run_length(scenario: Scenario, override: int | None = None, option: str = "--steps-run") -> int:
    """The RL steps of the run to project: the option, else `run_steps`, else a default (warned)."""
    if override is not None:
        return override
    if scenario.run_steps is not None:
        return scenario.run_steps
    warn(
        f"run_steps: not set; projecting a {DEFAULT_RUN_STEPS:,}-step run "
        f"(set run_steps in the scenario or pass {option})"
    )
    return DEFAULT_RUN_STEPS


def with_overrides(scenario: Scenario, overrides: Sequence[str]) -> Scenario:
    """The scenario with 'key.path=value' overrides applied, validated again."""
    return scenario_from_dict(scenario.model_dump(mode="json"), list(overrides), base_dir=scenario.base_dir)


def sample_fractions(scenario: Scenario, points: int = SCHEDULE_POINTS) -> list[float]:
    """The run fractions `sample_scenarios` simulates: 0 without a schedule, else `points` of them."""
    if scenario.workload.length_schedule is None:
        return [0.0]
    if points < 2:
        raise ScenarioError("--points", f"a length schedule needs at least 2 sample points, got {points}")
    return [i / (points - 1) for i in range(points)]


def sample_scenarios(scenario: Scenario, points: int = SCHEDULE_POINTS) -> list[tuple[float, Scenario]]:
    """(run fraction, scenario to simulate): one point without a schedule, else `points` of them.

    At fraction f the run's mean response length is start + (end - start) * f; the sample holds it
    constant (a schedule with equal ends), since the simulator would otherwise grow lengths over
    the few simulated steps instead of over the run.
    """
    sched = scenario.workload.length_schedule
    if sched is None:
        return [(0.0, scenario)]
    out = []
    for f in sample_fractions(scenario, points):
        mean = sched.start_mean + (sched.end_mean - sched.start_mean) * f
        out.append(
            (
                f,
                with_overrides(
                    scenario,
                    [
                        f"workload.length_schedule.start_mean={mean}",
                        f"workload.length_schedule.end_mean={mean}",
                    ],
                ),
            )
        )
    return out


def project_samples(
    samples: list[tuple[float, Scenario]], run_steps: int, executor: Executor | None = None
) -> tuple[RunProjection, list[RunMetrics]]:
    """Simulate every sample point and project the run; a point that cannot run is an error."""
    outcomes = (executor or LocalExecutor(1)).map(simulate_metrics, [s for _, s in samples])
    for out in outcomes:
        if out.error:
            raise ScenarioError("scenario", out.error)
    metrics = [o.metrics for o in outcomes]
    fill_steps = samples[0][1].pipeline.depth + 1  # steps before the pipeline is in steady state
    return project_points(
        [(f, m) for (f, _), m in zip(samples, metrics, strict=True)],
        run_steps,
        fill_steps=fill_steps,
    ), metrics


@dataclass
class CostReport:
    """A scenario's projected run priced at every matching catalog row, cheapest first."""

    scenario: str
    gpu: str
    simulated_steps: int
    projection: RunProjection
    metrics: list[RunMetrics]  # one per sample point
    lines: list[CostLine]
    layout: str = ""  # the mode, pools and TP priced (`layout`)


def cost_report(
    scenario: Scenario,
    *,
    run_steps: int | None = None,
    providers: Sequence[str] = (),
    pricing: str | None = None,
    prices_file: str | Path | None = None,
    preemption_overhead: float = 0.0,
    points: int = SCHEDULE_POINTS,
    today: date | None = None,
) -> CostReport:
    """Simulate the scenario and price a run of `run_steps` (default `scenario.steps`)."""
    if scenario.cluster.gpu == "cpu":
        raise ScenarioError("cluster.gpu", "the CPU device has no cloud price")
    gpu = get_gpu(scenario.cluster.gpu, field="cluster.gpu").key
    per_node = scenario.cluster.gpus_per_node
    every = load_prices(prices_file)
    rows = rows_for_gpu(every, gpu, providers=providers, pricing=pricing, gpus_per_node=per_node)
    if not rows:
        which = f" from {', '.join(providers)}" if providers else ""
        cls = f" {pricing}" if pricing else ""
        known = {r.provider for r in every}
        unknown = [p for p in providers if p.lower() not in {k.lower() for k in known}]
        if unknown:
            raise ScenarioError("--provider", unknown_name(unknown[0], sorted(known), "provider"))
        raise ScenarioError(
            "--provider" if providers else "cluster.gpu",
            f"no{cls} price for GPU '{gpu}'{which} in instances of {per_node} GPUs (one per "
            "node) in the catalog; add one with --prices",
        )
    if preemption_overhead < 0:
        raise ScenarioError("--preemption-overhead", f"must be >= 0, got {preemption_overhead}")
    steps = run_length(scenario, run_steps, "--steps")
    if text := staleness_warning(scenario):
        warn(text)
    projection, metrics = project_samples(sample_scenarios(scenario, points), steps)
    lines = cost_lines(projection, rows, today=today, preemption_overhead=preemption_overhead)
    return CostReport(scenario.name, gpu, scenario.steps, projection, metrics, lines, layout(scenario))


def layout(sc: Scenario) -> str:
    """What was priced, in words: mode, pools (or the shared cluster), TP, buffer depth."""
    p = sc.pipeline
    typed = mixed_gpu_types(pool_layout(sc))
    pools = (
        f"{sc.training_gpus} shared GPUs"
        if p.mode.value == "colocated"
        else " + ".join(
            f"{pool.gpus} {pool.name}" + (f" ({pool.gpu})" if typed else "")
            for pool in pool_layout(sc)
            if pool.shares is None
        )
        + " GPUs"
    )
    if p.reward_model is not None and p.reward_model.placement != "own_pool":
        pools += f", the reward model on the {p.reward_model.placement.removeprefix('with_')} GPUs"
    elif p.mode.value == "colocated" and p.reward_model is not None:
        pools += f" + {sc.reward_pool_gpus} reward"
    depth = f", buffer depth {p.depth}" if p.mode.value in ("async", "streaming") else ""
    return (
        f"{p.mode.value} on {sc.cluster.nodes}x{sc.cluster.gpus_per_node} {sc.cluster.gpu}: {pools}, "
        f"inference tp {p.inference.tp}, training tp {p.training.tp}{depth}"
    )
