"""Predicted against measured: rows with errors, limits and verdicts, and the issue's targets.

Pure functions of two `PhaseTimes` (simulated and measured, from `phases.py`). Errors:

- times (step, phases) and the speedup: relative, predicted / measured - 1;
- a phase the trainer never ran (measured 0, e.g. weight sync in the synchronous loop, where the
  generator *is* the trained model) but the simulator charges: its predicted time as a share of
  the measured step ("of step"), so a phase that should not exist is judged by what it costs;
- idle fractions: the difference in fraction points (0.05 = 5 percentage points).

Step time, generation, training, weight sync and the speedup are checked against `tolerance`, idle
fractions against `idle_tolerance`; the single states under a phase (prefill, decode, logprob,
train, optimizer) are shown to explain a miss and are not checked. `targets` applies the issue's
fixed acceptance figures (median step-time error <= 10%, each phase <= 20%, idle within 5 points)
whatever tolerance the command ran with.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from rlsim.validation.phases import PhaseTimes

CHECKED_PHASES = ("generation", "training", "sync (training)", "sync (inference)")
DETAIL_PHASES = {"generation": ("prefill", "decode"), "training": ("logprob", "train", "optimizer")}
STEP_TARGET = 0.10  # median |step-time error| over the modes (the validation target)
PHASE_TARGET = 0.20  # each phase's |error|
IDLE_TARGET = 0.05  # each pool's idle fraction, in fraction points


@dataclass(frozen=True)
class Row:
    """One compared quantity of one mode ("both" for the speedup)."""

    mode: str
    quantity: str
    unit: str  # "s", "fraction" or "ratio"
    predicted: float
    measured: float
    error: float | None  # see error_kind; None when neither side has the quantity
    error_kind: str  # "relative", "of step" or "points"
    limit: float | None  # None: shown, not checked
    detail: bool = False  # a state under a compared phase, shown to explain it

    @property
    def ok(self) -> bool | None:
        if self.limit is None or self.error is None:
            return None
        return abs(self.error) <= self.limit + 1e-12


@dataclass(frozen=True)
class Target:
    """One of the issue's acceptance figures, computed from the rows."""

    name: str
    value: float | None
    limit: float
    unit: str  # "relative" or "points"

    @property
    def met(self) -> bool | None:
        return None if self.value is None else self.value <= self.limit + 1e-12


def time_row(
    mode: str,
    quantity: str,
    predicted: float,
    measured: float,
    step_s: float,
    limit: float | None,
    detail: bool = False,
) -> Row:
    """A seconds row: relative error, or a share of the measured step when measured is 0."""
    if measured > 0:
        error, kind = predicted / measured - 1.0, "relative"
    else:
        error, kind = predicted / step_s, "of step"
    return Row(mode, quantity, "s", predicted, measured, error, kind, limit, detail)


def compare_mode(
    mode: str,
    predicted: PhaseTimes,
    measured: PhaseTimes,
    tolerance: float,
    idle_tolerance: float,
) -> list[Row]:
    """Rows for one trainer mode: step, phases (with their states), sync, idle per pool."""
    step = measured.step_s
    rows = [time_row(mode, "step", predicted.step_s, step, step, tolerance)]
    for phase in CHECKED_PHASES:
        p, m = predicted.phase_s(phase), measured.phase_s(phase)
        if p == 0.0 and m == 0.0:
            continue  # neither side has it (no weight sync in a synchronous run's engine)
        rows.append(time_row(mode, phase, p, m, step, tolerance))
        for state in DETAIL_PHASES.get(phase, ()):
            ps, ms = predicted.phase_s(state), measured.phase_s(state)
            if ps > 0.0 or ms > 0.0:
                rows.append(time_row(mode, state, ps, ms, step, None, detail=True))
    for pool, m_idle in measured.idle_fraction.items():
        p_idle = predicted.idle_fraction.get(pool, 0.0)
        rows.append(Row(mode, f"idle {pool}", "fraction", p_idle, m_idle, p_idle - m_idle, "points", idle_tolerance))
    return rows


def speedup_row(
    predicted_sync: PhaseTimes,
    predicted_async: PhaseTimes,
    measured_sync: PhaseTimes,
    measured_async: PhaseTimes,
    tolerance: float,
) -> Row:
    """Async-over-sync speedup: sync step time / async step time, predicted and measured."""
    p = predicted_sync.step_s / predicted_async.step_s
    m = measured_sync.step_s / measured_async.step_s
    return Row("both", "speedup async/sync", "ratio", p, m, p / m - 1.0, "relative", tolerance)


def median_rows(runs: Sequence[Sequence[Row]]) -> list[Row]:
    """One row per (mode, quantity) of several whole runs: the median predicted, measured and error.

    On a shared host one run samples one moment of its speed (calibration and trainer alike), so
    the median of each error over repeated runs is the figure to judge, not any single run's.
    Rows keep the first run's order; an error is None only when it is None in every run.
    """
    by_key: dict[tuple[str, str], list[Row]] = {}
    for rows in runs:
        for r in rows:
            by_key.setdefault((r.mode, r.quantity), []).append(r)
    out = []
    for same in by_key.values():
        errors = [r.error for r in same if r.error is not None]
        out.append(
            replace(
                same[0],
                predicted=statistics.median(r.predicted for r in same),
                measured=statistics.median(r.measured for r in same),
                error=statistics.median(errors) if errors else None,
            )
        )
    return out


def failures(rows: list[Row]) -> list[Row]:
    """The checked rows whose error exceeds their limit."""
    return [r for r in rows if r.ok is False]


def targets(rows: list[Row]) -> list[Target]:
    """The issue's acceptance figures over the rows (None where no row gives the figure)."""
    steps = [abs(r.error) for r in rows if r.quantity == "step" and r.error is not None]
    phases = [abs(r.error) for r in rows if r.quantity in CHECKED_PHASES and r.error is not None]
    idle = [abs(r.error) for r in rows if r.error_kind == "points" and r.error is not None]
    return [
        Target(
            "median |step-time error| over modes", statistics.median(steps) if steps else None, STEP_TARGET, "relative"
        ),
        Target("largest |phase error|", max(phases) if phases else None, PHASE_TARGET, "relative"),
        Target("largest |idle-fraction difference|", max(idle) if idle else None, IDLE_TARGET, "points"),
    ]


def row_dict(row: Row) -> dict[str, Any]:
    """A row for JSON, with its verdict."""
    return asdict(row) | {"ok": row.ok}


def target_dict(target: Target) -> dict[str, Any]:
    return asdict(target) | {"met": target.met}
