"""Rich tables for the CLI (the only place results become text, with the JSON writer beside it)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from rlsim.numbers import pct
from rlsim.outputs import json_text, write_text
from rlsim.runs import ModeRun


def _cause(cause: str | None) -> str:
    return (cause or "-").replace("idle-waiting-for-", "")


def _rows(r: ModeRun) -> list[tuple[str, str]]:
    m = r.metrics
    inf, tr = m.pools
    return [
        ("step s", f"{m.step_time_s:,.1f}"),
        ("steady step s", f"{m.steady_step_time_s:,.1f}"),
        ("rollouts/s", f"{m.rollouts_per_s:,.2f}"),
        ("out tokens/s", f"{m.output_tokens_per_s:,.0f}"),
        ("infer busy", f"{pct(inf.busy_fraction)} of {inf.gpus}"),
        ("infer idle", f"{pct(inf.idle_fraction)} {_cause(inf.top_idle_cause)}"),
        ("train busy", f"{pct(tr.busy_fraction)} of {tr.gpus}"),
        ("train idle", f"{pct(tr.idle_fraction)} {_cause(tr.top_idle_cause)}"),
        ("decode batch", f"{pct(m.decode_occupancy)} full"),
        ("tail (low batch)", pct(m.tail_fraction)),
        ("stale mean/max", f"{m.staleness_mean:.2f} / {m.staleness_max}"),
        ("dropped tok", f"{100 * m.dropped_token_fraction:.1f}%"),
        *_agent_rows(r),
        ("$/step", f"${r.cost.usd_per_step:,.2f}" if r.cost else "-"),
        ("$/1k steps", f"${r.cost.usd_per_1000_steps:,.0f}" if r.cost else "-"),
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
    for i, (label, _) in enumerate(table[0]):
        t.add_row(label, *[rows[i][1] for rows in table])
    return t


def price_caption(runs: list[ModeRun]) -> str:
    c = next((r.cost for r in runs if r.cost), None)
    if c is None:
        return (
            "No catalog price: the device has none, or no product rents this cluster's nodes "
            "(GPUs per instance = gpus_per_node); dollars not shown (rlsim cost --prices adds one)."
        )
    stale = " (older than a year)" if c.stale else ""
    return (
        f"Price: {c.provider} {c.product}, {c.pricing}, ${c.usd_per_gpu_hour:.2f}/GPU-hour, "
        f"observed {c.observed}{stale}; source: {c.source}"
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
