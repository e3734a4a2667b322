"""Plots for `sweep` and `plan`: metric-vs-parameter curves and the cost-vs-time frontier.

They take plain data (lists of dicts of parameter values and metrics, as a sweep's JSON rows
hold them) rather than planner objects, so the planner can change its types without touching
the plots, and tests can draw synthetic data. Same pixel layout rules as `plots.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rlsim.report.plots import DPI, WIDTH_PX

Row = Mapping[str, Any]
PANEL_PX, COLUMNS = 340, 3


def _label(key: str, labels: Mapping[str, str] | None) -> str:
    return (labels or {}).get(key, key)


def _positions(values: Sequence[Any]) -> tuple[dict[Any, float], list[Any] | None]:
    """Numeric x as is; strings (modes, GPU names) at 0, 1, ... in first-seen order."""
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return {v: float(v) for v in values}, None
    order = list(dict.fromkeys(values))
    return {v: float(i) for i, v in enumerate(order)}, order


def _draw_curves(ax: Axes, rows: Sequence[Row], x: str, metric: str, series: str | None) -> None:
    pos, ticks = _positions([r[x] for r in rows])
    groups: dict[Any, list[Row]] = {}
    for r in rows:
        if r.get(metric) is not None:
            groups.setdefault(r.get(series) if series else None, []).append(r)
    for key, members in groups.items():
        pts = sorted((pos[r[x]], float(r[metric])) for r in members)
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="o",
            markersize=4,
            linewidth=1.4,
            label=str(key) if series else None,
        )
    if ticks is not None:
        ax.set_xticks(range(len(ticks)), [str(t) for t in ticks], fontsize=8)
    if series and groups:
        ax.legend(fontsize=8, title=series, title_fontsize=8)
    ax.grid(alpha=0.3)


def sweep_figure(
    rows: Sequence[Row],
    x: str,
    metrics: Sequence[str],
    series: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """One panel per metric against the swept parameter `x`, one line per value of `series`."""
    if not rows or not metrics:
        raise ValueError("sweep_figure needs at least one row and one metric")
    ncols = min(COLUMNS, len(metrics))
    nrows = -(-len(metrics) // ncols)
    fig = Figure(figsize=(WIDTH_PX / DPI, nrows * PANEL_PX / DPI), dpi=DPI)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, metric in zip(axes.flat, metrics, strict=False):
        _draw_curves(ax, rows, x, metric, series)
        ax.set_xlabel(_label(x, labels), fontsize=9)
        ax.set_title(_label(metric, labels), loc="left", fontsize=9)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.set_visible(False)
    fig.subplots_adjust(
        left=0.07,
        right=0.98,
        top=1 - 36 / (nrows * PANEL_PX),
        bottom=60 / (nrows * PANEL_PX),
        wspace=0.28,
        hspace=0.45,
    )
    return fig


def pareto_front(points: Sequence[Row], x: str, y: str) -> list[Row]:
    """Points no other point beats on both x and y (both minimised), by increasing x."""
    front: list[Row] = []
    for p in sorted(points, key=lambda p: (p[x], p[y])):
        if not front or p[y] < front[-1][y]:
            front.append(p)
    return front


def _draw_frontier(ax: Axes, points: Sequence[Row], front: Sequence[Row], x: str, y: str,
                   label: str) -> None:  # fmt: skip
    ax.scatter([p[x] for p in points], [p[y] for p in points], s=18, color="0.65",
               label="candidates")  # fmt: skip
    style = {"drawstyle": "steps-post", "color": "#d62728", "marker": "o", "markersize": 6}
    ax.plot([p[x] for p in front], [p[y] for p in front], linewidth=1.6,
            label="frontier (cheapest for its time)", **style)  # fmt: skip
    for p in front:
        if p.get(label) is not None:
            ax.annotate(str(p[label]), (p[x], p[y]), textcoords="offset points", xytext=(6, 6),
                        fontsize=8)  # fmt: skip


def frontier_figure(
    points: Sequence[Row],
    x: str = "wall_days",
    y: str = "usd_per_run",
    frontier: Sequence[Row] | None = None,
    label: str = "label",
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """Every candidate in grey and the cost-vs-time frontier in red, frontier points labelled.

    `frontier` comes from the planner when it has one; otherwise the Pareto front of `points`.
    """
    if not points:
        raise ValueError("frontier_figure needs at least one point")
    front = frontier if frontier is not None else pareto_front(points, x, y)
    fig = Figure(figsize=(WIDTH_PX / DPI, 600 / DPI), dpi=DPI)
    ax = fig.add_axes((0.08, 0.1, 0.88, 0.82))
    _draw_frontier(ax, points, sorted(front, key=lambda p: p[x]), x, y, label)
    ax.set_xlabel(_label(x, labels), fontsize=9)
    ax.set_ylabel(_label(y, labels), fontsize=9)
    title = "Cost against time to train: every candidate and the frontier"
    ax.set_title(title, loc="left", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig
