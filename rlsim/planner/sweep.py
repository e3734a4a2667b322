"""A grid over any scenario fields (`rlsim sweep`): every combination simulated once.

Each `--vary key.path=v1,v2,...` is one axis; values are parsed as YAML, like `--set`. Points
are numbered with the first axis varying slowest. A point whose scenario is invalid or cannot
be placed gets its error instead of metrics, so one bad combination does not stop the grid.
Dollars per step use the catalog's default on-demand price of the point's GPU, as `simulate`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from rlsim.errors import ScenarioError
from rlsim.errors_format import validation_lines
from rlsim.metrics.cost import CostLine, cost_line
from rlsim.metrics.summary import RunMetrics
from rlsim.planner.costing import with_overrides
from rlsim.planner.executors import Executor, LocalExecutor, Progress, simulate_metrics
from rlsim.runs import price_for
from rlsim.scalars import leaf_types
from rlsim.scenario import Mode, Scenario, parse_override

MAX_POINTS = 10_000


@dataclass(frozen=True)
class SweepPoint:
    """One grid point: the varied values, and its metrics and cost or the reason it has none."""

    index: int
    values: dict[str, Any]  # key.path -> YAML-parsed value
    metrics: RunMetrics | None
    cost: CostLine | None
    error: str | None


@dataclass
class SweepResult:
    scenario: str
    mode: str | None
    keys: list[str]
    points: list[SweepPoint]


def parse_vary(texts: Sequence[str]) -> list[tuple[str, list[str]]]:
    """'key.path=v1,v2' -> (key.path, ['v1', 'v2']); each key at most once."""
    axes: list[tuple[str, list[str]]] = []
    for text in texts:
        if "=" not in text:
            raise ScenarioError("--vary", f"'{text}' must look like key.path=v1,v2,...")
        try:
            key, _ = parse_override(text)
        except ScenarioError as exc:
            raise ScenarioError("--vary", exc.reason) from None
        raw = text.split("=", 1)[1]
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not key or not values:
            raise ScenarioError("--vary", f"'{text}' must look like key.path=v1,v2,...")
        if any(key == k for k, _ in axes):
            raise ScenarioError("--vary", f"'{key}' is varied twice; give all its values in one --vary")
        axes.append((key, values))
    if not axes:
        raise ScenarioError("--vary", "give at least one axis: --vary key.path=v1,v2,...")
    return axes


def unknown_part(key: str) -> str | None:
    """The shortest prefix of a dotted key that names no scenario field, or None if it exists."""
    models: list[type[BaseModel]] = [Scenario]
    parts = key.split(".")
    for depth, part in enumerate(parts):
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if not fields:
            return ".".join(parts[: depth + 1])
        models = [
            t for f in fields for t in leaf_types(f.annotation) if isinstance(t, type) and issubclass(t, BaseModel)
        ]
    return None


def grid(axes: list[tuple[str, list[str]]], max_points: int = MAX_POINTS) -> list[list[str]]:
    """The override lists of every point, first axis slowest."""
    size = 1
    for _, values in axes:
        size *= len(values)
    if size > max_points:
        raise ScenarioError(
            "--vary",
            f"the grid has {size:,} points; at most {max_points:,} (raise --max-points to run it)",
        )
    keys = [k for k, _ in axes]
    return [
        [f"{k}={v}" for k, v in zip(keys, combo, strict=True)] for combo in itertools.product(*(v for _, v in axes))
    ]


def _point_scenario(base: Scenario, overrides: list[str], mode: str | None) -> Scenario:
    sc = base.with_mode(mode) if mode else base
    return with_overrides(sc, overrides)


def run_sweep(
    base: Scenario,
    vary: Sequence[str],
    *,
    mode: str | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
    max_points: int = MAX_POINTS,
) -> SweepResult:
    """Simulate every grid point (through the executor); results in grid order."""
    if mode is not None and mode not in {m.value for m in Mode}:
        raise ScenarioError("--mode", f"unknown mode '{mode}'; choose from {', '.join(m.value for m in Mode)}")
    axes = parse_vary(vary)
    for key, _ in axes:  # refused up front, not once per point
        unknown = unknown_part(key)
        if unknown is not None:
            raise ScenarioError("--vary", f"'{key}': '{unknown}' is not a scenario field (see `rlsim schema`)")
    overrides = grid(axes, max_points)
    scenarios: list[Scenario | str] = []
    for ov in overrides:
        try:
            scenarios.append(_point_scenario(base, ov, mode))
        except ScenarioError as exc:
            scenarios.append(str(exc))
        except ValidationError as exc:
            scenarios.append("; ".join(validation_lines(exc)))
    runnable = [s for s in scenarios if not isinstance(s, str)]
    outcomes = iter((executor or LocalExecutor()).map(simulate_metrics, runnable, progress))
    points = []
    for i, (ov, sc) in enumerate(zip(overrides, scenarios, strict=True)):
        values = dict(parse_override(o) for o in ov)
        if isinstance(sc, str):
            points.append(SweepPoint(i, values, None, None, sc))
            continue
        out = next(outcomes)
        row = price_for(sc) if out.metrics else None
        cost = cost_line(out.metrics, row) if row is not None and out.metrics else None
        points.append(SweepPoint(i, values, out.metrics, cost, out.error))
    return SweepResult(base.name, mode, [k for k, _ in axes], points)
