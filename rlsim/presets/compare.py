"""Simulate one scenario under several library presets, for `rlsim compare-presets`.

Returns plain result rows; the CLI renders them. A preset that cannot run on the scenario (a
library without LoRA on a LoRA scenario, a backend without tensor parallelism on a model that
then does not fit) becomes a row with the reason instead of aborting the whole comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from rlsim.errors import ScenarioError
from rlsim.errors_format import validation_lines
from rlsim.presets.library import Preset, apply_preset, get_preset, list_presets
from rlsim.runs import ModeRun, run_mode
from rlsim.scenario import Scenario


@dataclass
class PresetRun:
    """One preset applied to the scenario: its simulated run, or why it could not run."""

    preset: Preset
    run: ModeRun | None
    error: str | None = None


def _sort_key(row: PresetRun) -> tuple:
    if row.run is None:
        return (2, 0.0, row.preset.name)
    cost = row.run.cost
    if cost is not None:
        return (0, cost.usd_per_step, row.preset.name)
    return (1, row.run.metrics.step_time_s, row.preset.name)  # no catalog price: by step time


def compare_presets(scenario: Scenario, names: list[str] | None = None) -> list[PresetRun]:
    """The scenario under each named preset (all by default), cheapest $/step first, failures last."""
    presets = [get_preset(n) for n in names] if names else list_presets()  # unknown names fail early
    rows: list[PresetRun] = []
    for preset in presets:
        try:
            rows.append(PresetRun(preset, run_mode(apply_preset(scenario, preset.name))))
        except ScenarioError as exc:
            rows.append(PresetRun(preset, None, str(exc)))
        except ValidationError as exc:
            rows.append(PresetRun(preset, None, "; ".join(validation_lines(exc))))
    return sorted(rows, key=_sort_key)
