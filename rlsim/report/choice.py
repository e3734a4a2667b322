"""The recommendation and its sensitivity: which architecture to pick, and whether that holds.

The pick is the cheapest mode (dollars per steady-state RL step at the default price; seconds
per step when the device has no price) whose trained samples never lag more than a staleness
bound. Steady state, not the simulated average: a short simulation is mostly pipeline fill, which
a deep buffer pays once per run, so ranking on the average would let --steps choose the pick.
Every mode rents the same cluster, so cheaper means faster here, but dollars are what reviewers
ask about. The sensitivity re-runs the scenario with response lengths and training MFU moved by
+-25%: the two inputs a datasheet profile and a guessed workload get most wrong. When the pick
and the runner-up swap places in one of those cases, they are called a tie: the simulation cannot
tell them apart within the uncertainty of its own inputs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from rlsim.errors import ScenarioError
from rlsim.numbers import usd
from rlsim.runs import ModeRun, run_modes
from rlsim.scenario import Scenario, scenario_from_dict

FACTORS = (0.75, 1.25)


@dataclass
class Choice:
    """The recommended mode (None when no mode meets the bound) and why, in a sentence or three."""

    mode: str | None
    reason: str
    bound: int
    cost: str = ""
    runner_up: str | None = None  # the next mode within the bound, cheapest first


@dataclass
class Variant:
    """One sensitivity case: its ranking (cheapest first) and its pick, or why it was skipped."""

    name: str
    ranking: list[str]
    choice: Choice | None
    note: str = ""


STEADY_FILLS = 4  # simulate at least 4 x (deepest buffer + 1) steps: the fill, then steady steps


def steps_for_ranking(sc: Scenario, modes: Sequence[str]) -> int:
    """Enough steps for the deepest buffer to fill and the steady state to be measured after it."""
    depths = []
    for m in modes:
        try:
            depths.append(sc.with_mode(m).pipeline.depth)
        except ScenarioError:  # a mode this layout cannot run (left out of the comparison)
            continue
    return max(sc.steps, STEADY_FILLS * (max(depths, default=0) + 1))


def cost_key(run: ModeRun) -> float:
    """Dollars per steady-state step (seconds without a price): what a long run pays per step."""
    m = run.metrics
    if run.cost is None:
        return m.steady_step_time_s
    return run.cost.usd_per_step * m.steady_step_time_s / m.step_time_s


def money(x: float) -> str:
    """Dollars as every table writes them (`rlsim.numbers.usd`)."""
    return usd(x)


def cost_text(run: ModeRun) -> str:
    if run.cost:
        return f"{money(cost_key(run))} per steady step"
    return f"{run.metrics.steady_step_time_s:,.1f} s per steady step"


def ranking(runs: Sequence[ModeRun]) -> list[ModeRun]:
    """Cheapest first; ties by mode name, so the order never depends on the input order."""
    return sorted(runs, key=lambda r: (cost_key(r), r.metrics.mode))


def recommend(runs: Sequence[ModeRun], bound: int, bound_from: str = "") -> Choice:
    """The cheapest mode whose maximum staleness is within `bound`, with the reason.

    `bound_from` says where the bound came from (e.g. "the scenario's max_lag"), for the reason.
    """
    ranked = ranking(runs)
    eligible = [r for r in ranked if r.metrics.staleness_max <= bound]
    source = f" ({bound_from})" if bound_from else ""
    if not eligible:
        return Choice(
            None,
            f"No simulated architecture keeps every trained sample within {bound} policy "
            f"version(s){source}; relax the bound or add the sync mode to the comparison.",
            bound,
        )
    best = eligible[0]
    reason = (
        f"{best.metrics.mode} is the cheapest architecture whose trained samples lag at most "
        f"{bound} policy version(s) behind the trainer{source}: {cost_text(best)} "
        f"(staleness max {best.metrics.staleness_max})."
    )
    ref = next((r for r in ranked if r.metrics.mode == "sync" and r is not best), None)
    ref = ref or (eligible[1] if len(eligible) > 1 else None)
    if ref is not None and cost_key(ref) > 0:
        saving = 1 - cost_key(best) / cost_key(ref)
        reason += f" That is {saving:.0%} less than {ref.metrics.mode} ({cost_text(ref)})."
    for r in ranked[: ranked.index(best)]:
        reason += (
            f" {r.metrics.mode} would be cheaper ({cost_text(r)}) but its samples lag up to "
            f"{r.metrics.staleness_max} versions, beyond the bound."
        )
    second = eligible[1].metrics.mode if len(eligible) > 1 else None
    return Choice(best.metrics.mode, reason, bound, cost_text(best), second)


def response_overrides(sc: Scenario, factor: float) -> list[str] | None:
    """Overrides scaling the response lengths; None for lengths read from a file."""
    d, key = sc.workload.response_tokens, "workload.response_tokens"
    if d.kind == "lognormal":
        out = [f"{key}.mean={d.mean * factor:g}"]
    elif d.kind == "constant":
        out = [f"{key}.value={max(1, round(d.value * factor))}"]
    elif d.kind == "histogram":
        bins = [
            [max(1, round(lo * factor)), max(round(lo * factor) + 1, round(hi * factor)), w] for lo, hi, w in d.bins
        ]
        out = [f"{key}.bins={json.dumps(bins)}"]
    else:
        return None
    if sc.workload.length_schedule is not None:
        s = sc.workload.length_schedule
        out += [
            f"workload.length_schedule.start_mean={s.start_mean * factor:g}",
            f"workload.length_schedule.end_mean={s.end_mean * factor:g}",
        ]
    return out


def variant_overrides(sc: Scenario, train_mfu: float) -> list[tuple[str, list[str] | None]]:
    """(name, overrides) of the four sensitivity cases; `train_mfu` is the MFU the base run used."""
    out: list[tuple[str, list[str] | None]] = []
    for f in FACTORS:
        out.append((f"response length x{f:g}", response_overrides(sc, f)))
    for f in FACTORS:
        out.append(
            (
                f"training MFU x{f:g} ({min(1.0, train_mfu * f):.0%})",
                [f"pipeline.training.mfu={min(1.0, train_mfu * f):.4f}"],
            )
        )
    return out


def with_overrides(sc: Scenario, overrides: list[str]) -> Scenario:
    """The scenario with dotted-path overrides applied and validated again."""
    return scenario_from_dict(sc.model_dump(mode="json"), overrides, base_dir=sc.base_dir)


def sensitivity(sc: Scenario, base: Sequence[ModeRun], bound: int) -> list[Variant]:
    """The base ranking followed by the four variants, each simulated under the same modes."""
    modes = [r.metrics.mode for r in base]
    mfu = sc.pipeline.training.mfu or base[0].result.resolved.profile_of("training").train_mfu
    out = [Variant("as simulated", [r.metrics.mode for r in ranking(base)], recommend(base, bound))]
    for name, overrides in variant_overrides(sc, mfu):
        if overrides is None:
            out.append(Variant(name, [], None, "skipped: lengths come from a file"))
            continue
        runs = run_modes(with_overrides(sc, overrides), modes)
        out.append(Variant(name, [r.metrics.mode for r in ranking(runs)], recommend(runs, bound)))
    return out


def tie_sentence(variants: Sequence[Variant]) -> str:
    """A tie when the pick and its runner-up swap places in a sensitivity case; '' otherwise."""
    base = variants[0].choice
    if base is None or base.mode is None or base.runner_up is None:
        return ""
    a, b = base.mode, base.runner_up
    flips = [
        v.name for v in variants[1:] if a in v.ranking and b in v.ranking and v.ranking.index(b) < v.ranking.index(a)
    ]
    if not flips:
        return ""
    return (
        f"{a} and {b} are a tie within this report's sensitivity range: {b} comes out cheaper "
        f"with {', '.join(flips)}; measure those inputs (rlsim calibrate, your own length "
        "histogram) before choosing between them."
    )


def sensitivity_verdict(variants: Sequence[Variant]) -> str:
    """One sentence: does the pick survive every variant?"""
    base = variants[0].choice.mode if variants[0].choice else None
    moved = [v for v in variants[1:] if v.choice is not None and v.choice.mode != base]
    if not moved:
        return f"The recommendation ({base}) holds in every variant."
    cases = "; ".join(f"{v.name}: {v.choice.mode}" for v in moved if v.choice)
    n = len(variants) - 1
    return f"The recommendation ({base}) changes in {len(moved)} of {n} variants ({cases})."
