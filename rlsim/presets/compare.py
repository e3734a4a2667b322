"""Simulate one scenario under several library presets, for `rlsim compare-presets`.

Returns plain result rows; the CLI renders them. A preset that cannot run on the scenario (a
library without LoRA on a LoRA scenario, a backend without tensor parallelism on a model that
then does not fit) becomes a row with the reason instead of aborting the whole comparison.
Each row also carries the library's fact sheet entry and the flags of `fit.library_fit`: a
library whose facts rule it out for the scenario (one node only on a multi-node cluster, no
LoRA for a LoRA scenario, an engine the team does not run) is still simulated, and flagged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from rlsim.catalog.libraries import LibraryFacts, library_facts
from rlsim.errors import ScenarioError
from rlsim.errors_format import validation_lines
from rlsim.presets.fit import FitFlag, library_fit
from rlsim.presets.library import Preset, apply_preset, get_preset, list_presets
from rlsim.runs import ModeRun, run_mode
from rlsim.scenario import Scenario


@dataclass
class PresetRun:
    """One preset applied to the scenario: its simulated run, or why it could not run."""

    preset: Preset
    run: ModeRun | None
    error: str | None = None
    facts: LibraryFacts | None = None
    fit: list[FitFlag] = field(default_factory=list)

    @property
    def ruled_out(self) -> bool:
        return any(f.verdict == "ruled_out" for f in self.fit)


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
        facts = library_facts(preset.library)
        fit = library_fit(scenario, facts)
        try:
            run, error = run_mode(apply_preset(scenario, preset.name)), None
        except ScenarioError as exc:
            run, error = None, str(exc)
        except ValidationError as exc:
            run, error = None, "; ".join(validation_lines(exc))
        rows.append(PresetRun(preset, run, error, facts, fit))
    return sorted(rows, key=_sort_key)
