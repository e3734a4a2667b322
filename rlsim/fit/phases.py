"""Per-step phase times on both sides of a fit: a real run's log and a simulated run.

`simulated_steps` writes a simulation as the records a log reader returns (`StepLog`), with
verl's split of a step: generation = the trainer's wait for data before the step, old_log_prob =
the trainer's `logprob` state (old-policy, reference and value forwards), update_actor = `train`
+ `optimizer`, weight_sync = `sync` + `switch` (a colocated run's reshard and offload/reload,
which verl times inside its weight update), step = time between step ends. `phase_means` reduces
records of either side to the fitted phases, so measured and simulated numbers are counted the
same way. engine_generation is verl's `generate_sequences`: each rollout rank times its own
engine's `generate` call and verl averages the ranks (`reduce_timing`, ReduceOp.AVG), so it is the
mean engine's busy time in the step (prefill + decode), not the slowest engine's that the
trainer waits for (`gen`). Units: seconds, tokens.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from rlsim.logs.record import StepLog
from rlsim.simulator import states
from rlsim.simulator.run import SimResult

# The phases the fit compares, each the sum of these StepLog fields (None when none is logged).
FIT_PHASES: dict[str, tuple[str, ...]] = {
    "generation": ("generation_s",),
    "engine_generation": ("engine_generation_s",),
    "logprob": ("old_log_prob_s", "ref_s"),
    "update_actor": ("update_actor_s",),
    "weight_sync": ("weight_sync_s",),
    "step": ("step_s",),
}
_STATE_FIELD = {
    states.LOGPROB: "old_log_prob_s",
    states.TRAIN: "update_actor_s",
    states.OPTIMIZER: "update_actor_s",
    states.SYNC: "weight_sync_s",
    states.SWITCH: "weight_sync_s",
}


def simulated_steps(result: SimResult) -> list[StepLog]:
    """The simulated run as log records, one per trainer step (response lengths included)."""
    rec = result.recorder
    trainer = next(a for a, pool in sorted(rec.pools.items()) if pool == "training")
    busy: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for iv in rec.actor_intervals[trainer]:
        name = _STATE_FIELD.get(iv.state)
        if name is not None:
            busy[iv.step][name] += iv.end_s - iv.start_s
    engines = [a for a, pool in rec.pools.items() if pool == "inference"]
    generating: dict[int, float] = defaultdict(float)  # step -> engine-seconds of prefill + decode
    for a in engines:
        for iv in rec.actor_intervals[a]:
            if iv.state in (states.PREFILL, states.DECODE):
                generating[iv.step] += iv.end_s - iv.start_s
    clip_at = getattr(result.scenario.workload.response_tokens, "max", None)
    out, prev_end = [], 0.0
    for s in rec.steps:
        lengths = np.asarray(s.response_lengths)
        phases = {f: busy[s.step].get(f, 0.0) for f in ("old_log_prob_s", "update_actor_s", "weight_sync_s")}
        out.append(
            StepLog(
                step=s.step,
                generation_s=s.start_s - prev_end,
                engine_generation_s=generating[s.step] / len(engines) if engines else None,
                step_s=s.end_s - prev_end,
                response_mean=float(lengths.mean()),
                response_max=float(lengths.max()),
                response_min=float(lengths.min()),
                response_clip_ratio=float((lengths >= clip_at).mean()) if clip_at else 0.0,
                response_lengths=tuple(int(n) for n in lengths),
                **phases,
            )
        )
        prev_end = s.end_s
    return out


def phase_value(step: StepLog, phase: str) -> float | None:
    """A step's time in one fit phase: the sum of its logged parts, None when none is logged."""
    parts = [getattr(step, f) for f in FIT_PHASES[phase]]
    logged = [p for p in parts if p is not None]
    return sum(logged) if logged else None


def phase_means(steps: list[StepLog]) -> dict[str, float]:
    """Mean seconds per step of each fit phase logged in at least one step."""
    out = {}
    for phase in FIT_PHASES:
        values = [v for s in steps if (v := phase_value(s, phase)) is not None]
        if values:
            out[phase] = float(np.mean(values))
    return out
