"""Rich tables for the CLI (the only place results become text, with the JSON writer beside it)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from rlsim.numbers import pct
from rlsim.outputs import json_text, write_text
from rlsim.runs import ModeRun


def _cause(cause: str | None) -> str:
    return (cause or "-").replace("idle-waiting-for-", "")


POOL_LABELS = {"inference": "infer", "training": "train"}  # short row labels; other pools by name


def _pool_rows(r: ModeRun) -> list[tuple[str, str]]:
    """Busy and idle rows for every pool, in pool order (a GPU type when the pools' types differ)."""
    rows = []
    for p in r.metrics.pools:
        label = POOL_LABELS.get(p.pool, p.pool)
        on = f" {p.gpu_type}" if p.gpu_type else ""
        rows += [
            (f"{label} busy", f"{pct(p.busy_fraction)} of {p.gpus}{on}"),
            (f"{label} idle", f"{pct(p.idle_fraction)} {_cause(p.top_idle_cause)}"),
        ]
        score = p.gpu_seconds_by_state.get("score", 0.0)
        if score > 0 and p.pool != "reward":  # a reward model sharing this pool's GPUs
            rows.append((f"{label} scoring", pct(score / (sum(p.gpu_seconds_by_state.values()) or 1.0))))
    return rows


def _rows(r: ModeRun) -> list[tuple[str, str]]:
    m = r.metrics
    return [
        ("step s", f"{m.step_time_s:,.1f}"),
        ("steady step s", f"{m.steady_step_time_s:,.1f}"),
        *_periodic_rows(m),
        ("rollouts/s", f"{m.rollouts_per_s:,.2f}"),
        ("out tokens/s", f"{m.output_tokens_per_s:,.0f}"),
        *_pool_rows(r),
        ("decode batch", f"{pct(m.decode_occupancy)} full"),
        ("tail (low batch)", pct(m.tail_fraction)),
        ("stale mean/max", f"{m.staleness_mean:.2f} / {m.staleness_max}"),
        ("dropped tok", f"{100 * m.dropped_token_fraction:.1f}%"),
        *_partial_rows(m),
        *_agent_rows(r),
        ("$/step", f"${r.cost.usd_per_step:,.2f}" if r.cost else "-"),
        ("$/1k steps", f"${r.cost.usd_per_1000_steps:,.0f}" if r.cost else "-"),
    ]


def _periodic_rows(m) -> list[tuple[str, str]]:
    """Evaluation and checkpoints, their mean per step over the run, apart from the step (off: no row)."""
    p = m.periodic
    if p is None:
        return []
    return [("eval + ckpt s/step", f"{p.amortized_s_per_step:,.1f}")]


def _filter_rows(r: ModeRun) -> list[tuple[str, str]]:
    """Dynamic sampling's rows, shown when some run of the table filters groups."""
    d = r.metrics.dynamic_sampling
    if d is None:
        return [("filtered tok", "-"), ("gen rounds mean/max", "-")]
    return [
        ("filtered tok", f"{100 * d.filtered_token_fraction:.1f}%"),
        ("gen rounds mean/max", f"{d.gen_rounds_per_step:.2f} / {d.gen_rounds_max}"),
    ]


def _partial_rows(m) -> list[tuple[str, str]]:
    """Partial rollouts: what each step carried and how old the trained tokens are (none: no rows)."""
    p = m.partial_rollout
    if p is None:
        return []
    return [
        ("prompts in flight", f"{p.prompts_in_flight}"),
        ("carried seq/step", f"{p.carried_sequences_per_step:,.1f}"),
        ("carried tok/step", f"{p.carried_tokens_per_step:,.0f}"),
        ("token lag mean/max", f"{p.token_lag_mean:.2f} / {p.token_lag_max}"),
    ]


def _agent_rows(r: ModeRun) -> list[tuple[str, str]]:
    """Multi-turn agent episodes: turns, and how much of an episode waits on tools (none: no rows)."""
    a = r.metrics.agent
    if a is None:
        return []
    return [
        ("turns/episode", f"{a.turns_per_episode:.1f}"),
        ("episode s", f"{a.episode_s:,.1f}"),
        ("  in tool calls", pct(a.episode_tool_fraction)),
        ("env wait s/call", f"{a.environment_wait_s:,.2f}"),
    ]


def modes_table(runs: list[ModeRun], title: str) -> Table:
    """Metrics as rows, one column per simulated mode (fits a terminal for five modes)."""
    t = Table(title=title, title_justify="left")
    t.add_column("metric", no_wrap=True)
    for r in runs:
        t.add_column(
            r.metrics.mode if len({x.scenario.name for x in runs}) == 1 else f"{r.scenario.name}\n{r.metrics.mode}",
            justify="right",
        )
    table = [_rows(r) for r in runs]
    if any(r.metrics.dynamic_sampling is not None for r in runs):
        at = next(i for i, (label, _) in enumerate(table[0]) if label == "dropped tok") + 1
        table = [rows[:at] + _filter_rows(r) + rows[at:] for r, rows in zip(runs, table, strict=True)]
    cells = [dict(rows) for rows in table]
    labels = list(dict.fromkeys(label for rows in table for label, _ in rows))  # runs may differ in optional rows
    for label in labels:
        t.add_row(label, *[c.get(label, "-") for c in cells])
    return t


def price_caption(runs: list[ModeRun]) -> str:
    c = next((r.cost for r in runs if r.cost), None)
    if c is None:
        return (
            "No catalog price: the device has none, or no product rents this cluster's nodes "
            "(GPUs per instance = gpus_per_node); dollars not shown (rlsim cost --prices adds one)."
        )
    stale = " (older than a year)" if c.stale else ""
    per_pool = ""
    if c.pools:  # pools of different GPU types: each at its type's price ($/GPU-hour)
        per_pool = "; priced per pool: " + ", ".join(
            f"{p.pool} {p.gpus}x {p.gpu_type} ${p.usd_per_gpu_hour:.2f}" for p in c.pools
        )
    return (
        f"Price: {c.provider} {c.product}, {c.pricing}, ${c.usd_per_gpu_hour:.2f}/GPU-hour, "
        f"observed {c.observed}{stale}; source: {c.source}{per_pool}"
    )


def runs_json(runs: list[ModeRun]) -> dict[str, Any]:
    return {
        "scenario": runs[0].scenario.name if runs else None,
        "modes": [
            {"metrics": r.metrics.model_dump(mode="json"), "cost": r.cost.model_dump(mode="json") if r.cost else None}
            for r in runs
        ],
    }


def write_json(data: Any, path: str) -> None:
    """Write JSON to a file, or to stdout when path is '-' (sorted keys: byte-identical reruns).

    NaN and infinities are written as null (`rlsim.outputs.json_text`): the output is strict JSON.
    """
    write_text(json_text(data, indent=2, sort_keys=True) + "\n", path)
