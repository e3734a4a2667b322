"""The published-run validation suite: public measurements of real RL runs, one YAML row each.

A row encodes a published setup as an ordinary scenario (the setup only: model, GPUs, pools,
batch, lengths, parallel layout) together with what the source measured, so that `rlsim validate
--published` can simulate it and print predicted against published. Where the source leaves a
value unstated, the row says so in `assumptions`, next to the scenario path it sets and why that
value was chosen. No row may carry a constant that exists to make that row match: the scenario
fields a row sets are the ones a user would set for that run.

Row kinds:
- `run`: an end-to-end RL run; compared per published phase (`PHASES`), and as a sync->async
  speedup against the row named in `pair_with` (the ratio of the two steps, each row with its
  own run's batch; or `published_speedup` where the source states the speedup itself, as an
  analytic case does in tokens per unit time without step times: then per generated token), or
  as a step-time ratio against the row named in `ratio_to` (sources that publish a trend but
  not the batch); where the published step holds several simulated ones
  (`steps_per_published_step`, verl's fully-async sync windows) their times add;
- `weight_sync`: one weight update, checked through the weight-sync model directly;
- `generation`: an offline inference batch (a serving benchmark), checked as output tokens/s of
  the simulated engines.

Units: seconds and tokens/s, as the sources publish them.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlsim.errors import ScenarioError
from rlsim.inputs import load_shipped_yaml

_ROW = ConfigDict(frozen=True, extra="forbid")

# Published phase name -> what the simulator's per-step phase times hold for it (see
# `rlsim.validation.published_run.predicted_phases`). The names follow the sources' own logs.
PHASES: dict[str, str] = {
    "step_s": "time between RL step ends (verl timing_s/step, NeMo RL total_step_time)",
    "gen_s": "the trainer's wait for the batch plus, colocated, the switch and weight sync (verl timing_s/gen); "
    "with NeMo RL's timers the wait and the engines' sleep only (NeMo RL generation)",
    "wait_s": "the trainer's wait for the batch (verl wait_prev_gen: generation not hidden by training)",
    "generate_s": "an engine's generation time per step, prefill + decode (verl generate_sequences)",
    "logprob_s": "old-policy and reference log-prob passes (verl old_log_prob, NeMo RL logprobs)",
    "update_s": "forward + backward + optimizer (verl update_actor, NeMo RL policy_training)",
    "refit_s": "weight sync plus the engines' wake when colocated (NeMo RL refit, timed as prepare_for_generation)",
    "sync_s": "one weight update, trainer side",
    "output_tokens_per_s": "generated tokens / generation time (serving benchmarks)",
}


class Assumption(BaseModel):
    """A value the source does not state: where it goes, what it is, and why it was chosen."""

    model_config = _ROW
    field: str = Field(description="Dotted scenario path the value sets (or 'setup' for a modelling choice).")
    value: Any = Field(description="The value assumed.")
    why: str = Field(description="Why this value: the recipe default, a related source, or a stated guess.")


class PublishedRow(BaseModel):
    """One published measurement and the scenario that describes its setup."""

    model_config = _ROW
    id: str = Field(description="Short stable identifier (used by --only).")
    kind: Literal["run", "weight_sync", "generation"] = Field(description="What is compared (see module doc).")
    title: str = Field(description="One line: library, model, GPUs, mode.")
    source: str = Field(description="Primary source of the published figures: repo@commit:path or URL, and its date.")
    read_on: str = Field(description="ISO date the source was read (its figures as of that day).")
    setup_source: str | None = Field(
        default=None, description="Where the setup (batch, lengths, layout) comes from when not the same source."
    )
    published: dict[str, float] = Field(description="Published figures by phase name (keys of PHASES).")
    published_range: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="Published [low, high] where the source gives a range; error 0 inside it."
    )
    pair_with: str | None = Field(default=None, description="The synchronous row this (asynchronous) row speeds up.")
    ratio_to: str | None = Field(default=None, description="Compare step_s as a ratio to this row's step_s.")
    published_speedup: float | None = Field(
        default=None,
        gt=0,
        description="The published speedup over `pair_with` where the source gives it directly rather than two "
        "step times (an analytic case in relative token throughput); compared per generated token.",
    )
    steps_per_published_step: int = Field(
        default=1,
        ge=1,
        description="Simulated RL steps one published step holds, their times added: verl's fully-async trainer "
        "logs timing_s/* summed over the trigger_parameter_sync_step local updates between two weight syncs "
        "(MetricsAggregator time_sum), and the row simulates each local update as one rlsim step.",
    )
    step_over_run: bool = Field(
        default=False,
        description="The published step_s is a run's wall time over its steps (e.g. '150 steps in 22.79 h'), so it "
        "holds the run's periodic evaluation and checkpoints: the compared step is the simulated step plus their "
        "time amortized over the scenario's run_steps (the run's steps; scenario.evaluation / checkpointing, each "
        "encoded only as the source states it).",
    )
    timers: Literal["verl", "nemo_rl"] = Field(
        default="verl",
        description="Whose timers the published phases are. verl: timing_s/gen holds the colocated switch both ways "
        "and the weight sync (the sharding manager's enter and exit around generate_sequences). nemo_rl: the refit "
        "(weight sync and the engines' wake, prepare_for_generation) is timed apart from generation, which holds the "
        "engines' sleep (finish_generation inside the generation timer: NVIDIA-NeMo/RL@v0.3.0 "
        "nemo_rl/algorithms/grpo.py grpo_train), so each gets one direction of the switch.",
    )
    held_out: bool = Field(
        default=False,
        description="An independent check: encoded after the terms it exercises and used to choose none of them, so "
        "its errors are reported apart from the development rows' targets (a row stops being held out once a term "
        "is changed because of it).",
    )
    assumptions: list[Assumption] = Field(default_factory=list, description="Every value the source leaves unstated.")
    notes: str = Field(default="", description="Caveats in words.")
    scenario: dict[str, Any] = Field(description="The scenario mapping (as in a scenario YAML file).")

    def check_phases(self) -> None:
        unknown = sorted(set(self.published) - set(PHASES))
        if unknown:
            raise ScenarioError(f"published row {self.id}", f"unknown phase(s) {unknown}; use {sorted(PHASES)}")
        if self.published_speedup is not None and not self.pair_with:
            raise ScenarioError(f"published row {self.id}", "published_speedup needs pair_with (the row it speeds up)")
        if self.step_over_run and not isinstance(self.scenario.get("run_steps"), int):
            raise ScenarioError(
                f"published row {self.id}: scenario.run_steps",
                "step_over_run needs the run's steps as run_steps (the published step is its wall time over them)",
            )
        steps = self.scenario.get("steps")
        if self.kind != "weight_sync" and isinstance(steps, int) and steps < 2:
            raise ScenarioError(
                f"published row {self.id}: scenario.steps",
                f"is {steps}; a row is compared over its steady steps, from the end of step 0, so it needs at least 2",
            )


def _folder() -> Any:
    return resources.files("rlsim.validation") / "published"


@cache
def published_rows() -> tuple[PublishedRow, ...]:
    """Every row shipped in `rlsim/validation/published/`, in file-name order."""
    rows = []
    for entry in sorted(_folder().iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        try:
            row = PublishedRow.model_validate(load_shipped_yaml(entry.read_text()))
        except ValidationError as exc:
            raise ScenarioError(f"published row {entry.name}", str(exc).splitlines()[0]) from None
        row.check_phases()
        rows.append(row)
    ids = [r.id for r in rows]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ScenarioError("published rows", f"duplicate ids {dupes}")
    return tuple(rows)


def select_rows(only: list[str] | None) -> list[PublishedRow]:
    """The rows named in `only` and the rows compared with them (either way round), or every row."""
    rows = {r.id: r for r in published_rows()}
    if not only:
        return list(rows.values())
    unknown = [i for i in only if i not in rows]
    if unknown:
        raise ScenarioError("--only", f"unknown row(s) {', '.join(unknown)}; see `rlsim validate --published --list`")
    wanted = set(only)
    for r in rows.values():
        partner = r.pair_with or r.ratio_to
        if r.id in only and partner:
            wanted.add(partner)
        elif partner in only:
            wanted.add(r.id)
    return [r for r in rows.values() if r.id in wanted]
