"""The common record every log reader produces: per RL step, phase seconds and length statistics.

Phases use verl's split of a synchronous step (`timing_s/*`): generation, old-log-prob
recomputation, reference forward, actor update (forward, backward, optimizer), weight update and
the whole step; a reader fills what its format carries and leaves the rest None. Lengths are
per-step statistics of the response (completion) tokens, or every sample's length where the
format logs them. A reader that cannot use a file raises `ScenarioError` naming the file and the
line or key (`log_error`), which the CLI prints as one line with exit code 2.
Units: seconds, tokens, fractions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from rlsim.errors import ScenarioError

PHASES = ("generation_s", "old_log_prob_s", "ref_s", "update_actor_s", "weight_sync_s", "step_s")
LENGTHS = ("response_mean", "response_max", "response_min", "response_clip_ratio", "prompt_mean")


@dataclass(frozen=True)
class StepLog:
    """One RL step of a real run, as far as its log says (None: not logged)."""

    step: int
    generation_s: float | None = None  # rollout generation (verl timing_s/gen)
    engine_generation_s: float | None = None  # the engines' own part of it (verl timing_s/generate_sequences)
    old_log_prob_s: float | None = None  # old-policy log-prob forward (timing_s/old_log_prob)
    ref_s: float | None = None  # reference-model forward (timing_s/ref)
    update_actor_s: float | None = None  # forward + backward + optimizer (timing_s/update_actor)
    weight_sync_s: float | None = None  # trainer -> engines weight update (timing_s/update_weights)
    step_s: float | None = None  # the whole RL step (timing_s/step)
    response_mean: float | None = None  # mean response tokens (response_length/mean)
    response_max: float | None = None
    response_min: float | None = None
    response_clip_ratio: float | None = None  # share of responses cut at the max length
    prompt_mean: float | None = None
    generation_wait_s: float | None = None  # a pipelined trainer's wait for the rollout (timing_s/wait_prev_gen)
    trainer_idle_ratio: float | None = None  # verl fully async: fully_async/trainer/idle_ratio
    rollouter_idle_ratio: float | None = None  # verl fully async: fully_async/rollouter/idle_ratio
    response_lengths: tuple[int, ...] = field(default=(), repr=False)  # every sample, where logged


@dataclass(frozen=True)
class RunLog:
    """A parsed log: the file, the reader that parsed it, and its steps in step order."""

    path: str
    format: str
    steps: tuple[StepLog, ...]

    def window(self, first: int | None, last: int | None) -> RunLog:
        """The steps whose number lies in [first, last] (None: open)."""
        kept = tuple(s for s in self.steps if (first is None or s.step >= first) and (last is None or s.step <= last))
        return replace(self, steps=kept)


def log_error(path: str, where: str | int | None, reason: str) -> ScenarioError:
    """'path:line: reason' (an int is a line number) or 'path: where: reason'."""
    if isinstance(where, int):
        return ScenarioError(f"{path}:{where}", reason)
    return ScenarioError(str(path), f"{where}: {reason}" if where else reason)


def number(path: str, where: str | int, key: str, value: Any) -> float:
    """A logged value as a finite float, or a one-line error naming the key."""
    if isinstance(value, bool):
        raise log_error(path, where, f"key '{key}' is {value!r}, not a number")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise log_error(path, where, f"key '{key}' is {value!r}, not a number") from None
    if not math.isfinite(out):
        raise log_error(path, where, f"key '{key}' is {value!r}, not a finite number")
    return out


def csv_cells(path: str, reader: Iterable[list[str]], width: int) -> Iterable[tuple[int, list[str]]]:
    """(line number, cells) of each non-empty data row of a CSV whose header has `width` columns;
    a row of another width (a truncated file) is a `log_error` naming its line."""
    for lineno, cells in enumerate(reader, start=2):
        if not cells:
            continue
        if len(cells) != width:
            raise log_error(path, lineno, f"{len(cells)} cells, the header has {width} (truncated?)")
        yield lineno, cells


def build_steps(
    path: str, rows: Iterable[tuple[str | int, int, Mapping[str, Any]]], keymap: Mapping[str, str]
) -> tuple[StepLog, ...]:
    """StepLogs from (where, step, {key: value}) rows; rows of one step merge; unknown keys are ignored.

    `keymap` maps a format's key to a StepLog field; a value that is not a number is an error
    naming `where` (line or step) and the key. Empty cells (None, '') are skipped.
    """
    merged: dict[int, dict[str, float]] = {}
    for where, step, row in rows:
        acc = merged.setdefault(step, {})
        for key, value in row.items():
            name = keymap.get(key)
            if name is None or value is None or value == "":
                continue
            acc[name] = number(path, where, key, value)
    return tuple(StepLog(step=s, **vals) for s, vals in sorted(merged.items()))


def require_any(log: RunLog, expected: str) -> RunLog:
    """The log itself, or an error when no step carries a phase time or a length statistic."""
    names = PHASES + LENGTHS
    if (
        not log.steps
        or all(getattr(s, n) is None for s in log.steps for n in names)
        and not any(s.response_lengths for s in log.steps)
    ):
        raise log_error(log.path, None, f"no step carries any of the keys this reader knows ({expected})")
    return log


def field_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(StepLog))
