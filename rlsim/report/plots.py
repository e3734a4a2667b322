"""Plots of simulated runs: a Gantt timeline per mode and a stacked bar of GPU time by state.

The timeline is the picture that explains the comparison: GPUs (or pools) as rows, coloured by
state, over the first few RL steps of every mode on one shared clock, so the sync loop's idle
bubbles sit above the async modes' overlap. The bar shows where each mode's GPU time goes per RL
step. Only plotting code imports this module (it imports matplotlib); `rlsim simulate` does so
only for `--plot`. Figures are laid out in pixels (no tight bounding box), so an image's size is
known before it is drawn: WIDTH_PX wide, and as tall as its rows need.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from rlsim.report.formats import figure_format
from rlsim.report.lanes import run_labels, timeline_rows
from rlsim.runs import ModeRun
from rlsim.simulator import states as st

DPI = 100
WIDTH_PX = 1200
LEFT_PX, RIGHT_PX = 175, 20
ROW_PX, TITLE_PX, TOP_PX, AXIS_PX = 20, 30, 40, 48
BAR_PX = 300
UNASSIGNED = "unassigned"
# Busy states in saturated hues, idle states pale, so idle bubbles read as gaps.
STATE_COLORS = {
    st.DECODE: "#1f77b4",
    st.PREFILL: "#9ecae1",
    st.TRAIN: "#2ca02c",
    st.LOGPROB: "#a1d99b",
    st.OPTIMIZER: "#005a32",
    st.SYNC: "#d62728",
    st.SWITCH: "#9467bd",
    st.SCORE: "#e377c2",
    st.IDLE_DATA: "#e0e0e0",
    st.IDLE_WEIGHTS: "#fdd9a8",
    UNASSIGNED: "#ffffff",
}


def _figure(height_px: int) -> Figure:
    return Figure(figsize=(WIDTH_PX / DPI, height_px / DPI), dpi=DPI)


def _axes(fig: Figure, top_px: int, height_px: int) -> Axes:
    """Axes placed in pixels from the figure's top edge."""
    w, h = fig.get_size_inches() * DPI
    rect = (LEFT_PX / w, 1 - (top_px + height_px) / h, 1 - (LEFT_PX + RIGHT_PX) / w, height_px / h)
    return fig.add_axes(rect)


def _legend(fig: Figure, names: Sequence[str]) -> None:
    handles = [Patch(facecolor=STATE_COLORS[s], edgecolor="0.6", linewidth=0.5, label=s) for s in names]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False, fontsize=8)


def window_s(runs: Sequence[ModeRun], steps: int) -> float:
    """End of the slowest mode's first `steps` RL steps: faster modes show more steps in it."""
    ends = [r.result.recorder.steps[min(steps, len(r.result.recorder.steps)) - 1].end_s for r in runs]
    return max(ends)


def _panel_px(run: ModeRun, max_rows: int) -> int:
    rows, _ = timeline_rows(run.result.recorder, max_rows)
    return len(rows) * ROW_PX


def _draw_timeline(ax: Axes, run: ModeRun, label: str, end_s: float, max_rows: int) -> set[str]:
    """One mode's rows; returns the states drawn (for the legend)."""
    rec = run.result.recorder
    rows, hidden = timeline_rows(rec, max_rows)
    drawn: set[str] = set()
    for y, row in enumerate(rows):
        spans: dict[str, list[tuple[float, float]]] = {}
        for iv in rec.gpu_timeline(row.gpus[0]):
            if iv.start_s < end_s:
                spans.setdefault(iv.state, []).append((iv.start_s, min(iv.end_s, end_s) - iv.start_s))
        for state, xr in spans.items():
            ax.broken_barh(xr, (y - 0.42, 0.84), facecolors=STATE_COLORS[state], linewidth=0)
        drawn |= spans.keys()
    for s in rec.steps:  # a new policy version is published at each step's end
        if s.end_s <= end_s:
            ax.axvline(s.end_s, color="0.25", linewidth=0.7, linestyle=":")
    if rec.end_s < end_s:  # a fast mode finished every simulated step inside the window
        ax.text(
            rec.end_s,
            (len(rows) - 1) / 2,
            "  end of simulated run",
            va="center",
            fontsize=8,
            color="0.35",
        )
    ax.set_yticks(range(len(rows)), [r.label for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, end_s)
    ax.tick_params(axis="x", labelsize=8)
    m = run.metrics
    more = f"; {hidden} more engines not shown" if hidden else ""
    p = m.partial_rollout
    carried = f", {p.carried_sequences_per_step:,.0f} seq carried/step" if p is not None else ""
    ax.set_title(
        f"{label}: {m.step_time_s:,.0f} s/step, {m.idle_fraction:.0%} of GPU time idle, "
        f"staleness max {m.staleness_max}{carried} (dotted: step ends){more}",
        loc="left",
        fontsize=9,
    )
    return drawn


def _draw_timelines(fig: Figure, runs: Sequence[ModeRun], steps: int, max_rows: int, top_px: int) -> set[str]:
    end_s = window_s(runs, steps)
    drawn: set[str] = set()
    axes = []
    for run, label in zip(runs, run_labels(runs), strict=True):
        height = _panel_px(run, max_rows)
        ax = _axes(fig, top_px + TITLE_PX, height)
        drawn |= _draw_timeline(ax, run, label, end_s, max_rows)
        axes.append(ax)
        top_px += TITLE_PX + height
    for ax in axes[:-1]:
        ax.tick_params(axis="x", labelbottom=False)
    axes[-1].set_xlabel("simulated time (s)", fontsize=9)
    return drawn


def _timelines_px(runs: Sequence[ModeRun], max_rows: int) -> int:
    return sum(TITLE_PX + _panel_px(r, max_rows) for r in runs)


def gpu_minutes_per_step(run: ModeRun) -> dict[str, float]:
    """GPU-minutes per RL step by state, plus rented GPUs that no pool uses."""
    m = run.metrics
    by_state = {s: m.gpu_seconds_by_state.get(s, 0.0) for s in st.ALL_STATES}
    unassigned = m.gpus * m.wall_time_s - sum(by_state.values())
    by_state[UNASSIGNED] = unassigned if unassigned > 1e-6 * m.gpus * m.wall_time_s else 0.0  # not rounding noise
    return {s: v / 60.0 / m.steps for s, v in by_state.items()}


def _draw_gpu_time(ax: Axes, runs: Sequence[ModeRun]) -> set[str]:
    per_run = [gpu_minutes_per_step(r) for r in runs]
    names = [s for s in (*st.ALL_STATES, UNASSIGNED) if any(p[s] > 0 for p in per_run)]
    bottoms = [0.0] * len(runs)
    for s in names:
        values = [p[s] for p in per_run]
        ax.bar(
            range(len(runs)),
            values,
            bottom=bottoms,
            width=0.6,
            color=STATE_COLORS[s],
            edgecolor="0.6",
            linewidth=0.4,
        )
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    for i, r in enumerate(runs):
        ax.text(
            i,
            bottoms[i],
            f"idle {r.metrics.idle_fraction:.0%}",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(range(len(runs)), run_labels(runs), fontsize=9)
    ax.set_ylabel("GPU-minutes per RL step", fontsize=9)
    ax.set_ylim(0, max(bottoms) * 1.12)
    ax.set_title(
        "GPU time by state (all rented GPUs, averaged over the simulated steps)",
        loc="left",
        fontsize=9,
    )
    return set(names)


def _ordered(names: set[str]) -> list[str]:
    return [s for s in (*st.ALL_STATES, UNASSIGNED) if s in names]


def timeline_figure(runs: Sequence[ModeRun], steps: int = 3, max_rows: int = 10) -> Figure:
    """Gantt chart of the first `steps` RL steps of every run, on a shared clock."""
    fig = _figure(TOP_PX + _timelines_px(runs, max_rows) + AXIS_PX)
    _legend(fig, _ordered(_draw_timelines(fig, runs, steps, max_rows, TOP_PX)))
    return fig


def gpu_time_figure(runs: Sequence[ModeRun]) -> Figure:
    """Stacked bar per run: GPU-minutes per RL step by state."""
    fig = _figure(TOP_PX + TITLE_PX + BAR_PX + AXIS_PX)
    _legend(fig, _ordered(_draw_gpu_time(_axes(fig, TOP_PX + TITLE_PX, BAR_PX), runs)))
    return fig


def simulation_figure(runs: Sequence[ModeRun], steps: int = 3, max_rows: int = 10) -> Figure:
    """What `simulate --plot` writes: the timelines above the GPU-time bar."""
    timelines = _timelines_px(runs, max_rows)
    fig = _figure(TOP_PX + timelines + AXIS_PX + TITLE_PX + BAR_PX + AXIS_PX)
    drawn = _draw_timelines(fig, runs, steps, max_rows, TOP_PX)
    drawn |= _draw_gpu_time(_axes(fig, TOP_PX + timelines + AXIS_PX + TITLE_PX, BAR_PX), runs)
    _legend(fig, _ordered(drawn))
    return fig


def save_figure(fig: Figure, path: str) -> None:
    """PNG or SVG by extension, at the figure's own pixel size (no tight bbox)."""
    fmt = figure_format(path)
    metadata = {"Date": None} if fmt == "svg" else {"Software": None}  # byte-stable reruns
    fig.savefig(path, format=fmt, dpi=DPI, metadata=metadata)


def figure_png(fig: Figure) -> bytes:
    """The figure as PNG bytes (for embedding in the report)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def save_simulation_plot(runs: Sequence[ModeRun], path: str, steps: int = 3) -> None:
    """`simulate --plot PATH`: timelines and GPU-time bar in one PNG or SVG."""
    save_figure(simulation_figure(runs, steps), path)
