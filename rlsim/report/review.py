"""The architecture-review report: simulate every mode, then fill the sections of `document`.

`build_review` is the one library call behind `rlsim report`: it runs the five architectures,
prices them at every catalog offer for the scenario's GPU, picks one under a staleness bound and
re-runs the sensitivity cases. Rendering (HTML or Markdown) is `render.py`'s job. This module
draws the plots, so it imports matplotlib through `plots`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from rlsim import __version__
from rlsim.catalog.prices import PriceRow, assembles, load_prices
from rlsim.metrics.cost import cost_line, project_points
from rlsim.metrics.summary import RunMetrics
from rlsim.numbers import pct, usd
from rlsim.planner.costing import run_length
from rlsim.pools import gpus_text
from rlsim.presets import compare_presets
from rlsim.report.choice import (
    Choice,
    Variant,
    cost_key,
    recommend,
    sensitivity,
    sensitivity_verdict,
    steps_for_ranking,
    tie_sentence,
)
from rlsim.report.describe import assumption_blocks, gpu_name, scenario_blocks
from rlsim.report.document import Block, Bullets, Paragraph, Picture, Review, Section, Table
from rlsim.report.lanes import run_labels
from rlsim.report.libraries import library_blocks
from rlsim.report.plots import figure_png, gpu_time_figure, timeline_figure
from rlsim.runs import ALL_MODES, ModeRun, run_modes
from rlsim.scenario import Scenario


def run_usd(r: ModeRun, run_steps: int) -> float | None:
    """Dollars of a whole run: the simulated fill once, then steady steps (None without a price)."""
    if r.cost is None:
        return None
    p = project_points([(0.0, r.metrics)], run_steps, fill_steps=r.scenario.pipeline.depth + 1)
    if r.cost.pools:  # pools of different GPU types: the run's blended price per GPU-hour
        return p.gpus * p.wall_time_s / 3600.0 * r.cost.usd_per_run / r.cost.gpu_hours_per_run
    return p.gpus * p.wall_time_s / 3600.0 * r.cost.usd_per_gpu_hour


def _metric_rows(r: ModeRun, run_steps: int) -> list[tuple[str, str]]:
    m, c = r.metrics, r.cost
    return [
        ("step time, s", f"{m.step_time_s:,.1f}"),
        ("steady-state step time, s", f"{m.steady_step_time_s:,.1f}"),
        ("rollouts per s", f"{m.rollouts_per_s:,.2f}"),
        ("generated tokens per s", f"{m.output_tokens_per_s:,.0f}"),
        *(
            (f"{p.pool} GPUs busy", f"{pct(p.busy_fraction)} of {p.gpus}" + (f" {p.gpu_type}" if p.gpu_type else ""))
            for p in m.pools
        ),
        ("idle share of GPU time", pct(m.idle_fraction)),
        ("decode batch occupancy", pct(m.decode_occupancy)),
        ("tail: decode at low batch", pct(m.tail_fraction)),
        ("staleness mean / max", f"{m.staleness_mean:.2f} / {m.staleness_max}"),
        ("dropped tokens", f"{100 * m.dropped_token_fraction:.1f}%"),
        *_filter_rows(m),
        *_partial_rows(m),
        ("$ per step", usd(c.usd_per_step if c else None)),
        ("$ per 1,000 steps", usd(c.usd_per_1000_steps if c else None)),
        ("idle $ per 1,000 steps", usd(c.idle_usd_per_run / m.steps * 1000 if c else None)),
        ("$ per steady step (ranks the pick)", usd(cost_key(r) if c else None)),
        (f"$ per run of {run_steps:,} steps", usd(run_usd(r, run_steps))),
    ]


def _filter_rows(m: RunMetrics) -> list[tuple[str, str]]:
    d = m.dynamic_sampling
    if d is None:
        return []
    return [
        ("filtered tokens (dynamic sampling)", f"{100 * d.filtered_token_fraction:.1f}%"),
        ("generation rounds per step, mean / max", f"{d.gen_rounds_per_step:.2f} / {d.gen_rounds_max}"),
    ]


def _partial_rows(m) -> list[tuple[str, str]]:
    """Partial rollouts (pipeline.partial_rollout): what each step carried, how old its tokens are."""
    p = m.partial_rollout
    if p is None:
        return []
    return [
        ("prompts in flight per step", f"{p.prompts_in_flight}"),
        (
            "carried sequences / tokens per step",
            f"{p.carried_sequences_per_step:,.1f} / {p.carried_tokens_per_step:,.0f}",
        ),
        ("token lag mean / max", f"{p.token_lag_mean:.2f} / {p.token_lag_max}"),
    ]


def comparison_blocks(runs: Sequence[ModeRun], run_steps: int) -> list[Block]:
    cols = [dict(_metric_rows(r, run_steps)) for r in runs]
    labels = list(dict.fromkeys(label for c in cols for label in c))  # runs may differ in optional rows
    rows = [[label, *(c.get(label, "-") for c in cols)] for label in labels]
    c = next((r.cost for r in runs if r.cost), None)
    price = (
        f"Dollars at {c.provider} {c.product} ({c.pricing}, ${c.usd_per_gpu_hour:.2f} per "
        f"GPU-hour, observed {c.observed}), the catalog's default price."
        if c
        else "No catalog price for this device, or no product that rents its nodes."
    )
    return [
        Table(
            ["metric", *run_labels(runs)],
            rows,
            caption=f"Averages over the {runs[0].metrics.steps} simulated steps, except the steady "
            f"step (after the pipeline fills) and the run of {run_steps:,} steps (the fill once, "
            f"then steady steps). {price}",
        )
    ]


def picture_blocks(runs: Sequence[ModeRun], steps: int) -> list[Block]:
    return [
        Picture(
            figure_png(timeline_figure(runs, steps)),
            "Gantt timeline of every architecture",
            caption=f"The first {steps} RL steps of the slowest mode on a shared clock; rows are "
            "GPUs (GPUs with identical timelines share a row). Pale colours are idle time: grey "
            "waits for data, orange waits for new weights.",
        ),
        Picture(
            figure_png(gpu_time_figure(runs)),
            "GPU time by state",
            caption="Where each architecture's GPU time goes in an average RL step.",
        ),
    ]


def _offers(sc: Scenario) -> list[PriceRow]:
    rows = [
        r
        for r in load_prices()
        if r.gpu == sc.cluster.gpu and r.pricing in ("on_demand", "spot") and assembles(r, sc.cluster.gpus_per_node)
    ]
    return sorted(rows, key=lambda r: (r.usd_per_gpu_hour, r.provider, r.product, r.region or ""))


def _offer_row(row: PriceRow, runs: Sequence[ModeRun], today: date) -> list[str]:
    lines = [cost_line(r.metrics, row, today=today) for r in runs]
    where = f"{row.product} ({row.region})" if row.region else row.product
    seen = row.observed + (" (stale)" if lines[0].stale else "")
    price = f"${row.usd_per_gpu_hour:.2f}"
    return [row.provider, where, row.pricing.replace("_", "-"), price, seen,
            *(usd(c.usd_per_1000_steps) for c in lines)]  # fmt: skip


def cost_blocks(runs: Sequence[ModeRun], today: date) -> list[Block]:
    """Dollars per 1,000 steps of every mode at every on-demand and spot offer for the GPU."""
    sc = runs[0].scenario
    gpu = gpu_name(sc.cluster.gpu)
    offers = _offers(sc) if sc.cluster.gpu != "cpu" else []
    if not offers:
        return [Paragraph(f"The price catalog has no on-demand or spot offer for {gpu} in instances "
                          f"of {sc.cluster.gpus_per_node} GPUs (one per node); add one with a price "
                          "file to see dollars.")]  # fmt: skip
    headers = ["provider", "product", "pricing", "$/GPU-hour", "observed"]
    headers += [f"{m} $/1k steps" for m in run_labels(runs)]
    caption = (
        f"{len(offers)} offers for {gpu}, cheapest first. Spot capacity can be reclaimed; no "
        "preemption overhead is added here. 'stale': observed over a year ago."
    )
    rows = [_offer_row(row, runs, today) for row in offers]
    return [
        Table(headers, rows, caption=caption, align="llnrn"),
        Paragraph("Price sources:"),
        Bullets(sorted({f"{r.provider}: {r.source}" for r in offers})),
    ]


def staleness_blocks(runs: Sequence[ModeRun], bound: int) -> list[Block]:
    rows = []
    for r, label in zip(runs, run_labels(runs), strict=True):
        m, p = r.metrics, r.scenario.pipeline
        rows.append(
            [
                label,
                str(p.depth),
                p.interrupt.value,
                f"{m.staleness_mean:.2f}",
                str(m.staleness_max),
                "yes" if m.staleness_max <= bound else "no",
                f"{100 * m.dropped_token_fraction:.1f}%",
                f"{m.buffer_max_groups} / {m.buffer_capacity_groups}",
            ]
        )
    return [
        Paragraph(
            "Staleness of a trained sample is the trainer's step minus the policy version that "
            "generated it. Overlapping generation with training buys throughput with staleness; "
            "off-policy samples need importance weighting or clipping, so the review bounds it at "
            f"{bound} version(s)."
        ),
        Table(
            [
                "mode",
                "buffer depth",
                "on new weights",
                "mean",
                "max",
                f"max <= {bound}",
                "dropped tokens",
                "buffer max / capacity (groups)",
            ],
            rows,
            align="lrlrrlrr",
        ),
    ]


def sensitivity_blocks(variants: Sequence[Variant]) -> list[Block]:
    rows = [
        [
            v.name,
            " < ".join(v.ranking) or "-",
            (v.choice.mode or "none") if v.choice else "-",
            v.choice.cost if v.choice else v.note,
        ]
        for v in variants
    ]
    return [
        Paragraph(
            "How the ranking (cheapest first) and the pick move when the mean response length or "
            "the training MFU is 25% lower or higher than assumed; each case re-simulates every "
            "mode."
        ),
        Table(["case", "ranking, cheapest first", "pick", "pick's cost"], rows, align="nlll"),
        Paragraph(" ".join(x for x in (sensitivity_verdict(variants), tie_sentence(variants)) if x)),
    ]


def build_review(
    sc: Scenario,
    *,
    modes: list[str] | None = None,
    max_staleness: int | None = None,
    with_sensitivity: bool = True,
    timeline_steps: int = 3,
    today: date | None = None,
    run_steps: int | None = None,
    presets: list[str] | None = None,
) -> Review:
    """Simulate `sc` under each mode and assemble the review (see docs/outputs.md).

    Every mode is simulated for at least `steps_for_ranking` steps, so the deepest buffer fills
    and the steady state the pick ranks on is measured after it. `presets` adds the "Libraries
    compared" section: the scenario under those library presets, beside each library's facts.
    """
    run_steps = run_length(sc, run_steps, "--steps-run")
    sc = sc.model_copy(update={"steps": steps_for_ranking(sc, modes or ALL_MODES)})
    runs = run_modes(sc, modes)
    if max_staleness is None:
        bound = sc.pipeline.staleness.max_lag
        bound_from = "the scenario's pipeline.staleness.max_lag; --max-staleness sets another"
    else:
        bound, bound_from = max_staleness, "--max-staleness"
    choice = recommend(runs, bound, bound_from)
    variants = sensitivity(sc, runs, bound) if with_sensitivity else []
    tie = tie_sentence(variants) if variants else ""
    if tie:
        choice.reason += " " + tie
    sections = [
        Section("scenario", scenario_blocks(sc, runs[0].result.resolved)),
        Section("assumptions", assumption_blocks(runs[0].result.resolved)),
        Section("architectures", comparison_blocks(runs, run_steps)),
        *([Section("libraries", library_blocks(compare_presets(sc, presets), sc.steps, run_steps))] if presets else []),
        Section("timelines", picture_blocks(runs, timeline_steps)),
        Section("cost", cost_blocks(runs, today or date.today())),
        Section("staleness", staleness_blocks(runs, bound)),
        Section("recommendation", [Paragraph(choice.reason)]),
        Section(
            "sensitivity",
            sensitivity_blocks(variants) if with_sensitivity else [Paragraph("Skipped (--no-sensitivity).")],
        ),
    ]
    return Review(
        f"Architecture review: {sc.name}",
        _summary(sc, runs, choice),
        sections,
        footer=f"Generated by rlsim {__version__} from {sc.steps} simulated steps per "
        "architecture. This file is self-contained: it loads nothing from the network.",
    )


def _rented(sc: Scenario) -> str:
    """'16x NVIDIA H100 ...', or the GPUs per type when the pools' types differ ('8x h200 + 8x h100-sxm')."""
    text = gpus_text(sc)
    return text if " + " in text else f"{sc.cluster.total_gpus}x {gpu_name(sc.cluster.gpu)}"


def _summary(sc: Scenario, runs: Sequence[ModeRun], choice: Choice) -> str:
    head = "Recommendation: " if choice.mode else ""
    return (
        f"{head}{choice.reason} Compared: {', '.join(run_labels(runs))} on "
        f"{_rented(sc)}, {sc.steps} simulated steps each."
    )
