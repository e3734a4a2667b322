"""The Python API: what a notebook calls, the same library calls the CLI makes.

`simulate` runs a scenario under its mode (or the modes asked for) and returns `Results`, whose
`to_dict()` is the JSON `rlsim simulate --json` writes and whose `to_records()` is one flat
mapping per mode (a table: `pandas.DataFrame(results.to_records())`; pandas is not needed).
`load_scenario` reads a YAML file or a built-in name; `plan` searches configurations like
`rlsim plan`. A scenario may be given as a path, a built-in name, a mapping of fields or a
`Scenario`. Warnings (a default run length, a staleness bound that does not bound) arrive as
ordinary Python warnings of category `rlsim.notices.RlsimWarning`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsim.runs import ModeRun, run_modes
from rlsim.scenario import Scenario, scenario_from_dict
from rlsim.scenario import load_scenario as _load_yaml

ScenarioLike = Scenario | Mapping[str, Any] | str | Path | None


def load_scenario(scenario: ScenarioLike = None, overrides: Sequence[str] = ()) -> Scenario:
    """A validated scenario from a YAML path, a built-in name (None: the default), a mapping of
    fields or a Scenario, with 'key.path=value' overrides applied."""
    if isinstance(scenario, Scenario):
        data, base_dir = scenario.model_dump(mode="json"), scenario.base_dir
        return scenario_from_dict(data, list(overrides), base_dir=base_dir)
    if isinstance(scenario, Mapping):
        return scenario_from_dict(dict(scenario), list(overrides))
    return _load_yaml(scenario, list(overrides))


@dataclass
class Results:
    """Simulated architectures of one scenario, in the order asked for (index by mode name)."""

    runs: list[ModeRun]

    def __iter__(self) -> Iterator[ModeRun]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def __getitem__(self, mode: str | int) -> ModeRun:
        if isinstance(mode, int):
            return self.runs[mode]
        for r in self.runs:
            if r.metrics.mode == mode:
                return r
        raise KeyError(f"no simulated mode '{mode}'; have {', '.join(self.modes)}")

    @property
    def modes(self) -> list[str]:
        return [r.metrics.mode for r in self.runs]

    def to_dict(self) -> dict[str, Any]:
        """The document `rlsim simulate --json` writes: metrics and cost per mode."""
        return {
            "scenario": self.runs[0].scenario.name if self.runs else None,
            "modes": [
                {
                    "metrics": r.metrics.model_dump(mode="json"),
                    "cost": r.cost.model_dump(mode="json") if r.cost else None,
                }
                for r in self.runs
            ],
        }

    def to_records(self) -> list[dict[str, Any]]:
        """One flat mapping per mode: scalar metrics, per-pool shares, GPU-seconds per state and
        the cost at the default price (`cost_` prefix); `pandas.DataFrame(...)` takes it as is."""
        out = []
        for r in self.runs:
            m = r.metrics.model_dump(mode="json")
            row = {k: v for k, v in m.items() if not isinstance(v, dict | list)}
            for pool in m["pools"]:
                for key in ("gpus", "busy_fraction", "idle_fraction", "top_idle_cause"):
                    row[f"{pool['pool']}_{key}"] = pool[key]
            for state, seconds in m["gpu_seconds_by_state"].items():
                row[f"gpu_seconds_{state.replace('-', '_')}"] = seconds
            for key, value in m.get("dynamic_sampling", {}).items():  # only when the scenario filters groups
                row[f"dynamic_sampling_{key}"] = value
            for key, value in (r.cost.model_dump(mode="json") if r.cost else {}).items():
                row[f"cost_{key}"] = value
            out.append(row)
        return out

    def __repr__(self) -> str:
        lines = [f"Results({self.runs[0].scenario.name if self.runs else ''}):"]
        for r in self.runs:
            m = r.metrics
            usd = f", ${r.cost.usd_per_step:,.2f}/step" if r.cost else ""
            lines.append(
                f"  {m.mode}: {m.step_time_s:,.1f} s/step, idle {m.idle_fraction:.0%}, "
                f"tail {m.tail_fraction:.0%}, staleness max {m.staleness_max}{usd}"
            )
        return "\n".join(lines)


def simulate(
    scenario: ScenarioLike = None,
    *,
    mode: str | None = None,
    modes: Sequence[str] | None = None,
    steps: int | None = None,
    seed: int | None = None,
    overrides: Sequence[str] = (),
) -> Results:
    """Simulate a scenario under its own mode, under `mode`, or under each of `modes`
    ("all" for the five); `steps` and `seed` override the scenario's."""
    sets = list(overrides) + [f"{k}={v}" for k, v in (("steps", steps), ("seed", seed)) if v is not None]
    sc = load_scenario(scenario, sets)
    if modes == "all":
        chosen = None
    elif modes is not None:
        chosen = list(modes)
    else:
        chosen = [mode or sc.pipeline.mode.value]
    return Results(run_modes(sc, chosen))


def plan(
    scenario: ScenarioLike = None,
    *,
    max_gpus: int = 8,
    gpu_types: Sequence[str] | None = None,
    inference_gpu_types: Sequence[str] | None = None,
    modes: Sequence[str] | None = None,
    deadline_hours: float | None = None,
    budget_usd: float | None = None,
    max_staleness: int | None = None,
    objective: str = "cost",
    steps: int = 4,
    run_steps: int | None = None,
    pricing: str = "on_demand",
    prices: str | Path | None = None,
    workers: int | None = None,
    overrides: Sequence[str] = (),
):
    """Search modes, pool splits, TP, buffer depth and sync interval (and, with
    `inference_gpu_types`, the inference pool's GPU type), as `rlsim plan` does; returns a
    `rlsim.planner.search.PlanResult` (`.recommended`, `.to_dict()`, `.to_records()`)."""
    from rlsim.planner.candidates import SearchSpace
    from rlsim.planner.executors import LocalExecutor
    from rlsim.planner.search import Constraints
    from rlsim.planner.search import plan as run_plan

    base = load_scenario(scenario, overrides)
    space = SearchSpace(
        max_gpus,
        tuple(gpu_types or (base.cluster.gpu,)),
        **({"modes": tuple(modes)} if modes else {}),
        **({"inference_gpu_types": tuple(inference_gpu_types)} if inference_gpu_types else {}),
    )
    return run_plan(
        base,
        space,
        constraints=Constraints(deadline_hours, budget_usd, max_staleness),
        objective=objective,
        sim_steps=steps,
        run_steps=run_steps,
        pricing=pricing,
        prices_file=prices,
        executor=LocalExecutor(workers),
    )
