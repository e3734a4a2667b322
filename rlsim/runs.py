"""Library entry points the CLI calls: simulate a scenario under one or several modes.

Each returns plain result objects (metrics and cost lines); rendering is the CLI's business.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsim.catalog.prices import PriceRow, default_price
from rlsim.errors import ScenarioError
from rlsim.metrics.cost import CostLine, cost_line
from rlsim.metrics.summary import RunMetrics, summarize
from rlsim.notices import staleness_warning, warn
from rlsim.scenario import Mode, Scenario
from rlsim.simulator.run import SimResult, simulate

ALL_MODES = [m.value for m in Mode]


@dataclass
class ModeRun:
    """One simulated architecture: its raw result, its metrics and its cost at the default price."""

    scenario: Scenario
    result: SimResult
    metrics: RunMetrics
    cost: CostLine | None


def price_for(scenario: Scenario) -> PriceRow | None:
    """The catalog's default on-demand price for the scenario's GPU (None for the CPU device)."""
    if scenario.cluster.gpu == "cpu":
        return None
    try:
        return default_price(scenario.cluster.gpu, gpus_per_node=scenario.cluster.gpus_per_node)
    except ScenarioError:
        return None


def run_mode(scenario: Scenario) -> ModeRun:
    result = simulate(scenario)
    metrics = summarize(result)
    row = price_for(scenario)
    try:
        cost = cost_line(metrics, row) if row is not None else None
    except ScenarioError:  # a pool of another GPU type has no catalog price: no dollars shown
        cost = None
    return ModeRun(scenario, result, metrics, cost)


def run_modes(scenario: Scenario, modes: list[str] | None = None) -> list[ModeRun]:
    """The scenario under each mode (all five by default), in the order given."""
    chosen = modes or ALL_MODES
    for m in chosen:
        if m not in ALL_MODES:
            raise ScenarioError("--modes", f"unknown mode '{m}'; choose from {', '.join(ALL_MODES)}")
    runs = []
    for m in chosen:
        try:
            moved = scenario.with_mode(m)
        except ScenarioError as exc:
            if modes:  # asked for by name: an error
                raise
            warn(f"{exc.field}: {exc.reason}; that mode is left out of the comparison")
            continue
        runs.append(run_mode(moved))
    own = next((r for r in runs if r.scenario.pipeline.mode is scenario.pipeline.mode), None)
    if own is not None and (text := staleness_warning(own.scenario, own.metrics.staleness_max)):
        warn(text)  # about the scenario's own mode: the others reset its mode-implied knobs
    return runs
