"""Chrome trace-event JSON of simulated runs, for Perfetto (ui.perfetto.dev) or chrome://tracing.

Layout (docs/outputs.md): one process per mode and pool ("sync/rollout", "sync/actor", "sync/reward"; a
colocated run is one process, "colocated"), one thread per GPU named the way RL frameworks
name their workers (`rollout/engine0/gpu0`, `actor/train/gpu4`, `actor_rollout/gpu0`), one
complete ('X') slice per recorded state interval with the policy version (and, on the trainer's
side, the RL step) in args, and counter ('C') tracks for each engine's running batch, the
rollout buffer's occupancy and the staleness of each trained batch (and, in agent scenarios, the
episodes waiting on a tool call). Several modes share one file
and one clock, a process group per mode, so the sync bubbles sit right above the async overlap.

Timestamps are integer microseconds. Each interval boundary is rounded once, so a GPU's slices
still tile its timeline with no gap or overlap (Perfetto rejects overlapping slices on a thread).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlsim import __version__
from rlsim.outputs import json_text, write_text
from rlsim.pools import gpus_text
from rlsim.report.lanes import ACTOR, COLOCATED, REWARD, ROLES, ROLLOUT, Lane, gpu_lanes, run_labels
from rlsim.runs import ModeRun
from rlsim.simulator.recorder import Interval, Recorder
from rlsim.simulator.states import IDLE_STATES

US_PER_S = 1_000_000
REWARD_PID_BASE = 900  # a reward pool's process per run, numbered apart so two-pool runs keep their ids
Event = dict[str, Any]


def _us(t_s: float) -> int:
    return int(round(t_s * US_PER_S))


def _pid(run_index: int, role: str) -> int:
    if role == REWARD:
        return REWARD_PID_BASE + run_index
    return 1 + run_index * len(ROLES) + ROLES.index(role)


def _tid(pid: int, gpu: int) -> int:
    """Thread ids unique across the file (Perfetto keys threads by tid); process-level events
    (names, counters) use tid = pid, the main-thread convention."""
    return pid * 1000 + gpu


def process_name(label: str, role: str) -> str:
    if role == COLOCATED:
        return label if label == COLOCATED else f"{label}/{COLOCATED}"
    return f"{label}/{role}"


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> Event:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def _metadata(lanes: list[Lane], run_index: int, label: str, caption: str) -> list[Event]:
    """Process and thread names plus sort order, so Perfetto lists modes and GPUs in order."""
    out: list[Event] = []
    for role in dict.fromkeys(lane.role for lane in lanes):
        pid = _pid(run_index, role)
        out += [
            _meta("process_name", pid, pid, {"name": process_name(label, role)}),
            _meta("process_sort_index", pid, pid, {"sort_index": _pid(run_index, ACTOR) if role == REWARD else pid}),
            _meta("process_labels", pid, pid, {"labels": caption}),
        ]
    for lane in lanes:
        pid = _pid(run_index, lane.role)
        out += [
            _meta("thread_name", pid, _tid(pid, lane.gpu), {"name": lane.name}),
            _meta("thread_sort_index", pid, _tid(pid, lane.gpu), {"sort_index": lane.gpu}),
        ]
    return out


def _slice(lane: Lane, iv: Interval, pid: int) -> Event | None:
    start, end = _us(iv.start_s), _us(iv.end_s)
    if end <= start:  # shorter than a microsecond: nothing to draw
        return None
    actor = lane.owner(iv.state)
    args: dict[str, Any] = {"policy_version": iv.version, "actor": actor}
    if actor == lane.trainer:  # engines do not record which RL step they serve
        args["step"] = iv.step
    return {
        "ph": "X",
        "name": iv.state,
        "cat": "idle" if iv.state in IDLE_STATES else "busy",
        "pid": pid,
        "tid": _tid(pid, lane.gpu),
        "ts": start,
        "dur": end - start,
        "args": args,
    }


def _slices(rec: Recorder, lanes: list[Lane], run_index: int) -> list[Event]:
    out = []
    for lane in lanes:
        pid = _pid(run_index, lane.role)
        out += [e for iv in rec.gpu_timeline(lane.gpu) if (e := _slice(lane, iv, pid)) is not None]
    return out


def _changes(samples: Sequence[tuple[float, float]]) -> list[tuple[int, float]]:
    """Counter samples reduced to changes: the last value at each microsecond, repeats dropped."""
    last_at: dict[int, float] = {}
    for t, v in samples:
        last_at[_us(t)] = v
    out: list[tuple[int, float]] = []
    for ts in sorted(last_at):
        if not out or out[-1][1] != last_at[ts]:
            out.append((ts, last_at[ts]))
    return out


def _counter(name: str, pid: int, ts: int, args: dict[str, float]) -> Event:
    return {"ph": "C", "name": name, "pid": pid, "tid": pid, "ts": ts, "args": args}


def _counters(rec: Recorder, lanes: list[Lane], run_index: int) -> list[Event]:
    """Batch per engine (and, under partial rollouts, what each step carried) on the rollout side;
    buffer occupancy and staleness on the trainer's."""
    roles = {lane.role for lane in lanes}
    gen_pid = _pid(run_index, COLOCATED if COLOCATED in roles else ROLLOUT)
    train_pid = _pid(run_index, COLOCATED if COLOCATED in roles else ACTOR)
    out = []
    for engine in sorted(rec.batch_samples, key=lambda e: (len(e), e)):  # engine2 before engine10
        for ts, v in _changes(rec.batch_samples[engine]):
            out.append(_counter(f"batch_size/{engine}", gen_pid, ts, {"sequences": v}))
    if rec.agent is not None:  # multi-turn agent episodes: how many wait on a tool call (no GPU)
        for ts, v in _changes(rec.agent.in_calls_samples):
            out.append(_counter("tool_calls", gen_pid, ts, {"episodes": v}))
    for ts, v in _changes(rec.buffer_samples):
        out.append(_counter("rollout_buffer", train_pid, ts, {"groups": v}))
    for s in rec.steps:
        out.append(_counter("staleness", train_pid, _us(s.start_s), {"mean": s.lag_mean, "max": s.lag_max}))
    if rec.filtering is not None:
        out += _filter_events(rec, gen_pid)
    for c in rec.carries:  # partial rollouts: what each step's end carried into the next
        out.append(_counter("carried", gen_pid, _us(c.end_s), {"sequences": c.sequences, "tokens": c.tokens}))
    return out


def _filter_events(rec: Recorder, pid: int) -> list[Event]:
    """Dynamic sampling: an instant at each generation round's start, and the groups discarded
    so far (all-equal rewards, or surplus) as a counter."""
    log = rec.filtering
    out = [
        {"ph": "i", "s": "p", "name": f"gen round {r} of step {batch}", "pid": pid, "tid": pid, "ts": _us(t),
         "args": {"step": batch, "round": r}}
        for t, batch, r in log.round_starts
    ]  # fmt: skip
    out += [_counter("filtered_groups", pid, ts, {"groups": v}) for ts, v in _changes(log.discards)]
    return out


def trace_events(runs: Sequence[ModeRun]) -> list[Event]:
    """Every event of the runs: metadata first, then slices, then counters, run by run."""
    events: list[Event] = []
    for i, (run, label) in enumerate(zip(runs, run_labels(runs), strict=True)):
        rec = run.result.recorder
        lanes = gpu_lanes(rec)
        sc = run.scenario
        caption = f"{sc.name}: {run.metrics.mode} on {gpus_text(sc)}"
        events += _metadata(lanes, i, label, caption)
        events += _slices(rec, lanes, i)
        events += _counters(rec, lanes, i)
    return events


def chrome_trace(runs: Sequence[ModeRun]) -> dict[str, Any]:
    """The JSON object format of the trace-event spec, with rlsim's provenance in otherData."""
    return {
        "traceEvents": trace_events(runs),
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": f"rlsim {__version__}",
            "scenarios": sorted({r.scenario.name for r in runs}),
            "modes": run_labels(runs),
            "time_unit": "microseconds of simulated time",
        },
    }


def write_trace(runs: Sequence[ModeRun], path: str) -> None:
    """Write the trace to `path` ('-' for stdout); compact, since traces get large."""
    write_text(json_text(chrome_trace(runs), separators=(",", ":")) + "\n", path)  # strict JSON
