"""Intervals in the shared state names -> per-step phase times and idle fractions.

One function (`phase_times`) reads both sides, so a difference between predicted and measured
comes from the timelines, never from two ways of counting. Adapters turn the trainer's JSON
document (`trainer_timeline`) and the simulator's recorder (`simulated_timeline`) into the same
`Timeline`: spans per pool, the times RL steps ended, and the actors of each pool.

Everything is measured over the steady-state window from the end of the first RL step to the end
of the last one compared (the first step also pays for start-up: process spawn, first-call
allocations). Per-step times are seconds in the window / steps in it, per actor of the pool (an
inference engine, the trainer). A pool's idle fraction is 1 - busy / (window x actors): time in
no state at all (the verifier, between two states) counts as idle, as it does in the simulator,
whose engines wait while the verifier scores. Units: seconds, fractions.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlsim.simulator.states import BUSY_STATES

# Phase name -> the "pool/state" keys it sums. Generation and training are the compared phases;
# the single states under them explain a miss.
PHASES: dict[str, tuple[str, ...]] = {
    "generation": ("inference/prefill", "inference/decode"),
    "prefill": ("inference/prefill",),
    "decode": ("inference/decode",),
    "training": ("training/logprob", "training/train", "training/optimizer"),
    "logprob": ("training/logprob",),
    "train": ("training/train",),
    "optimizer": ("training/optimizer",),
    "sync (training)": ("training/sync",),
    "sync (inference)": ("inference/sync",),
    "scoring (reward GPUs)": ("reward/score",),
    "scoring (engines)": ("inference/score",),
}


@dataclass(frozen=True)
class Span:
    """One interval of one actor of a pool in one state, seconds since the run started."""

    pool: str
    state: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Timeline:
    """A run as spans, the end time of each RL step (in step order), and actors per pool."""

    spans: tuple[Span, ...]
    step_ends_s: tuple[float, ...]
    actors: Mapping[str, int]


@dataclass(frozen=True)
class PhaseTimes:
    """Per-step seconds of each pool state and idle fraction of each pool, over the window."""

    steps: int  # RL steps inside the window (one fewer than the steps compared)
    window_s: float
    per_step_s: Mapping[str, float]  # "pool/state" -> seconds per step per actor
    idle_fraction: Mapping[str, float]  # pool -> idle share of its time in the window

    @property
    def step_s(self) -> float:
        """Mean time between step ends, seconds (the trainer's `timing/step_s`)."""
        return self.window_s / self.steps

    def phase_s(self, phase: str) -> float:
        """Seconds per step of a phase of `PHASES`."""
        return sum(self.per_step_s.get(key, 0.0) for key in PHASES[phase])


def phase_times(timeline: Timeline, steps: int | None = None) -> PhaseTimes:
    """Phase times over the window [end of step 0, end of step `steps` - 1] (default: all)."""
    ends = timeline.step_ends_s[:steps] if steps is not None else timeline.step_ends_s
    if len(ends) < 2:
        raise ValueError(f"need at least 2 completed RL steps to measure a step, got {len(ends)}")
    lo, hi = ends[0], ends[-1]
    if hi <= lo:
        raise ValueError("step end times must increase")
    totals: dict[str, float] = defaultdict(float)
    busy: dict[str, float] = defaultdict(float)
    for span in timeline.spans:
        seconds = min(span.end_s, hi) - max(span.start_s, lo)
        if seconds <= 0:
            continue
        totals[f"{span.pool}/{span.state}"] += seconds
        if span.state in BUSY_STATES:
            busy[span.pool] += seconds
    n, window = len(ends) - 1, hi - lo
    per_step = {key: s / timeline.actors[key.split("/")[0]] / n for key, s in sorted(totals.items())}
    idle = {
        pool: max(0.0, 1.0 - busy[pool] / (timeline.actors[pool] * window))  # >= 0 despite rounding
        for pool in sorted(timeline.actors)
        if timeline.actors[pool]
    }
    return PhaseTimes(steps=n, window_s=window, per_step_s=per_step, idle_fraction=idle)


def trainer_timeline(doc: Mapping[str, Any]) -> Timeline:
    """The trainer's JSON document (`rlsim.trainer.timeline`) as a Timeline: one actor per pool it records."""
    spans = tuple(Span(i["pool"], i["state"], float(i["start_s"]), float(i["end_s"])) for i in doc["intervals"])
    steps = sorted(doc["steps"], key=lambda s: s["step"])
    ends = tuple(float(s["timing/step_end_s"]) for s in steps if "timing/step_end_s" in s)
    return Timeline(spans, ends, {pool: 1 for pool in sorted({s.pool for s in spans} | {"inference", "training"})})


def simulated_timeline(recorder: Any) -> Timeline:
    """A simulator Recorder as a Timeline: each actor's own track (not the per-GPU merge).

    Colocated GPUs show one state at a time; the actors' tracks keep what each pool was doing,
    which is what the synchronous trainer records (the idle pool waits while the other works).
    """
    spans = tuple(
        Span(recorder.pools[actor], iv.state, iv.start_s, iv.end_s)
        for actor, intervals in sorted(recorder.actor_intervals.items())
        for iv in intervals
    )
    ends = tuple(s.end_s for s in recorder.steps)
    return Timeline(spans, ends, dict(Counter(recorder.pools.values())))
