"""The recorder: every actor's time in named states, plus the events metrics need.

Processes call `on_<event>` hooks; nothing else writes results. Each actor (an engine, the
trainer) holds one state at a time from t=0 to the end, so its intervals tile the wall time.
A GPU maps to the actors that run on it in priority order: in disaggregated pools one actor
per GPU; colocated GPUs list the trainer first, so the GPU shows the trainer's state whenever
the trainer is busy and the engine's otherwise. Either way each GPU's states sum to wall time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import lt, ne
from typing import Protocol

import numpy as np

from rlsim.simulator.states import BUSY_STATES
from rlsim.simulator.track import Interval, IntervalView, SampleLog, SampleView, Track

__all__ = ["Interval", "Recorder", "StepRecord"]


@dataclass
class StepRecord:
    """One RL step of the trainer."""

    step: int
    start_s: float  # when the trainer began this step (data ready)
    end_s: float  # when the new version was published
    groups: int
    samples: int
    tokens: int  # prompt + response tokens trained
    response_tokens: int
    lag_mean: float
    lag_max: int
    response_lengths: tuple[int, ...] = ()  # each trained sample's response tokens (a log's length stats)


@dataclass
class FilterLog:
    """What dynamic sampling threw away and how many generation rounds each batch took."""

    filtered_groups: int = 0  # groups whose rewards were all equal
    surplus_groups: int = 0  # useful groups beyond the B a step trains on (verl truncates the batch)
    filtered_tokens: int = 0  # response tokens of both kinds: generated, never trained
    rounds: dict[int, int] = field(default_factory=dict)  # batch -> generation rounds
    prompts: dict[int, int] = field(default_factory=dict)  # batch -> prompts generated
    filled: list[int] = field(default_factory=list)  # batches that reached B useful groups, in order
    round_starts: list[tuple[float, int, int]] = field(default_factory=list)  # (time, batch, round)
    discards: list[tuple[float, int]] = field(default_factory=list)  # (time, groups discarded so far)


@dataclass
class CarryRecord:
    """The end of one step's generation under partial rollouts (simulator/partial.py)."""

    step: int
    end_s: float  # when every engine had handed its unfinished work over
    groups: int  # groups moved to the next step (complete, started or not yet started)
    sequences: int  # started, unfinished sequences carried with their tokens
    tokens: int  # response tokens those hold (kept: trained later)
    resumed_prefill_tokens: int  # prompt + response tokens prefilled again when they resume
    trained_tokens: int  # response tokens of the step's B groups (the trainer's batch)
    token_lag_sum: int  # over those tokens: trainer step - version of the policy that produced it
    token_lag_max: int
    trained_carried: int  # samples of the batch that were carried unfinished at least once


@dataclass
class AgentTally:
    """Totals over the multi-turn episodes of a run (single-turn completions are not counted)."""

    calls: int = 0  # tool calls started
    call_s: float = 0.0  # their seconds (latency drawn for each call)
    queued_s: float = 0.0  # seconds calls waited for a free environment
    episodes: int = 0  # multi-turn episodes finished (their last turn generated)
    turns: int = 0  # their turns
    episode_s: float = 0.0  # their time from release to the last token
    episode_tool_s: float = 0.0  # of which in tool calls or waiting for an environment
    in_calls: int = 0  # episodes in a tool call (or waiting for an environment) now
    in_calls_samples: list[tuple[float, int]] = field(default_factory=list)  # (time, in_calls) at every change


class Deferred(Protocol):
    """What an actor has done but not yet logged (a plan committed in bulk: planned.py)."""

    def settle(self) -> None:
        """Log it now (through the recorder's `on_*` methods)."""


@dataclass
class Recorder:
    """Collects intervals per actor and the run's events; turns them into per-GPU timelines."""

    tracks: dict[str, Track] = field(default_factory=dict)  # actor -> its intervals, as columns (track.py)
    gpu_actors: dict[int, list[str]] = field(default_factory=dict)
    pools: dict[str, str] = field(default_factory=dict)  # actor -> pool name
    _open: dict[str, tuple[str, float, int, int]] = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    batch_logs: dict[str, SampleLog] = field(default_factory=dict)  # actor -> its batch at each prefill and idle wait
    # the engine's running batch at every change, as parallel lists of times and sizes (the
    # batch occupancy; two flat lists because drains extend them by whole spans at once)
    running_samples: dict[str, tuple[list[float], list[int]]] = field(default_factory=dict)
    buffer_samples: list[tuple[float, int]] = field(default_factory=list)
    syncs: list[tuple[float, float, int]] = field(default_factory=list)
    generated_tokens: int = 0
    dropped_tokens: int = 0
    discarded_tokens: int = 0
    dropped_groups: int = 0
    preemptions: int = 0
    reprefill_tokens: int = 0
    buffer_max: int = 0
    end_s: float = 0.0
    filtering: FilterLog | None = None  # set when dynamic sampling is on
    carries: list[CarryRecord] = field(default_factory=list)  # partial rollouts only, one per step
    agent: AgentTally | None = None  # multi-turn agent episodes (tools.py); None in single-turn runs
    # actor -> what it has done but not yet logged: settled before anything else is logged for the
    # actor, and at `close` (an engine's plan logs once, not at each commit: `defer`)
    _pending: dict[str, Deferred] = field(default_factory=dict)

    @property
    def actor_intervals(self) -> IntervalView:
        """actor -> its intervals (`Interval` objects, built at each look-up from its track)."""
        return IntervalView(self.tracks)

    @property
    def batch_samples(self) -> SampleView:
        """actor -> its (time, batch) samples (built at each look-up from its log)."""
        return SampleView(self.batch_logs)

    def add_actor(self, actor: str, pool: str, gpus: list[int], state: str) -> None:
        self.tracks[actor] = Track()
        self.pools[actor] = pool
        self._open[actor] = (state, 0.0, 0, 0)
        for g in gpus:
            self.gpu_actors.setdefault(g, []).append(actor)

    def defer(self, actor: str, entries: Deferred) -> None:
        """`entries` will log what `actor` has done so far (and may grow until then).

        Tracks and batch logs are only appended to, in time order per actor, and nothing reads
        them, nor the run's totals (`on_tokens`), before the run ends; so what an engine's plan
        logs can wait until the engine logs anything else, or the run closes. A different
        `entries` for the same actor settles the one before it first.
        """
        prev = self._pending.get(actor)
        if prev is not entries:
            if prev is not None:
                self.settle(actor)
            self._pending[actor] = entries

    def deferred(self, actor: str) -> Deferred | None:
        """What `actor` has yet to log (None: nothing)."""
        return self._pending.get(actor)

    def settle(self, actor: str) -> None:
        """Log what `actor` has deferred, now."""
        entries = self._pending.pop(actor, None)
        if entries is not None:
            entries.settle()

    def on_state(self, actor: str, state: str, now: float, step: int = 0, version: int = 0) -> None:
        if self._pending and actor in self._pending:
            self.settle(actor)
        prev, start, pstep, pver = self._open[actor]
        if prev == state and pstep == step and pver == version:
            return
        if now > start:  # `Track.append`, inline (an engine stepping span by span calls this twice a finish)
            track = self.tracks[actor]
            track.states.append(prev)
            track.start_s.append(start)
            track.end_s.append(now)
            track.steps.append(pstep)
            track.versions.append(pver)
        self._open[actor] = (state, now, step, version)

    def on_states(self, actor: str, states: list[str], times: list[float], steps: list[int], version: int) -> None:
        """`on_state` for each (state, time, step) in turn, at one version (a refill's steps, committed at once).

        An entry repeats the open state only if it repeats the entry before it (the first: the
        open state), and each entry kept ends the interval of the one kept before it. A refill
        alternates prefills and decode at rising times, so the entries all open intervals and
        the track takes them as whole slices; otherwise they go one by one.
        """
        if not states:
            return
        if self._pending and actor in self._pending:
            self.settle(actor)
        prev, start, pstep, pver = self._open[actor]
        track = self.tracks[actor]
        if (
            start < times[0]
            and (states[0] != prev or steps[0] != pstep or version != pver)
            and all(map(ne, states[1:], states[:-1]))
            and all(map(lt, times[:-1], times[1:]))
        ):
            n = len(states)  # (`array.fromlist`: a list's items without the iterator protocol)
            track.states.append(prev)
            track.states.extend(states[: n - 1])
            track.start_s.append(start)
            track.start_s.fromlist(times[: n - 1])
            track.end_s.fromlist(times)
            track.steps.append(pstep)
            track.steps.fromlist(steps[: n - 1])
            track.versions.append(pver)
            track.versions.fromlist([version] * (n - 1))
            self._open[actor] = (states[-1], times[-1], steps[-1], version)
            return
        put_state, put_start, put_end = track.states.append, track.start_s.append, track.end_s.append
        put_step, put_version = track.steps.append, track.versions.append
        for state, now, step in zip(states, times, steps):
            if state == prev and step == pstep and version == pver:
                continue
            if now > start:
                put_state(prev)
                put_start(start)
                put_end(now)
                put_step(pstep)
                put_version(pver)
            prev, start, pstep, pver = state, now, step, version
        self._open[actor] = (prev, start, pstep, pver)

    def on_batch(self, actor: str, now: float, batch: int) -> None:
        if self._pending and actor in self._pending:
            self.settle(actor)
        log = self.batch_logs.get(actor)
        if log is None:
            log = self.batch_logs[actor] = SampleLog()
        log.append(now, batch)

    def on_batches(self, actor: str, times: list[float], batches: list[int]) -> None:
        """`on_batch` for each (time, batch) in turn."""
        if self._pending and actor in self._pending:
            self.settle(actor)
        log = self.batch_logs.get(actor)
        if log is None:
            log = self.batch_logs[actor] = SampleLog()
        log.extend(times, batches)

    def running_log(self, actor: str) -> tuple[list[float], list[int]]:
        """(times, running batch sizes) an engine appends to at every change of its batch, in
        time order; repeated times and values are allowed (metrics integrate the step function)."""
        return self.running_samples.setdefault(actor, ([], []))

    def on_buffer(self, now: float, groups: int) -> None:
        self.buffer_samples.append((now, groups))
        self.buffer_max = max(self.buffer_max, groups)

    def on_tokens(self, n: int) -> None:
        self.generated_tokens += n

    def on_drop(self, tokens: int) -> None:
        self.dropped_groups += 1
        self.dropped_tokens += tokens

    def on_discard(self, tokens: int) -> None:
        self.discarded_tokens += tokens

    def on_preempt(self, reprefill_tokens: int, count: int = 1) -> None:
        """`count` preemptions (1, or a refill's in one go) whose contexts total `reprefill_tokens`."""
        self.preemptions += count
        self.reprefill_tokens += reprefill_tokens

    def on_carry(self, record: CarryRecord) -> None:
        self.carries.append(record)

    def on_sync(self, start: float, end: float, version: int) -> None:
        self.syncs.append((start, end, version))

    def on_tool_call(self, now: float, call_s: float, queued_s: float) -> None:
        """A tool call of `call_s` seconds, after `queued_s` waiting for a free environment."""
        tally = self.agent
        tally.calls += 1
        tally.call_s += call_s
        tally.queued_s += queued_s
        tally.in_calls += 1
        tally.in_calls_samples.append((now, tally.in_calls))

    def on_tool_return(self, now: float) -> None:
        tally = self.agent
        tally.in_calls -= 1
        tally.in_calls_samples.append((now, tally.in_calls))

    def on_episode(self, turns: int, seconds: float, tool_s: float) -> None:
        """An episode of `turns` ended, `seconds` after its release, `tool_s` of them in tool calls."""
        tally = self.agent
        tally.episodes += 1
        tally.turns += turns
        tally.episode_s += seconds
        tally.episode_tool_s += tool_s

    def on_step(self, record: StepRecord) -> None:
        self.steps.append(record)

    def close(self, now: float) -> None:
        """End every open interval at `now`, the wall time of the run (what was deferred logged first)."""
        for actor in list(self._pending):
            self.settle(actor)
        self.end_s = now
        for actor, (state, start, step, ver) in self._open.items():
            if now > start:
                self.tracks[actor].append(state, start, now, step, ver)
            self._open[actor] = (state, now, step, ver)

    def gpu_timeline(self, gpu: int) -> list[Interval]:
        """The GPU's intervals: the first actor (by priority) that is busy, else the first's idle."""
        return self.gpu_track(gpu).intervals()

    def gpu_track(self, gpu: int) -> Track:
        """`gpu_timeline` as a track (columns; an actor's own track when it is the GPU's only one)."""
        actors = self.gpu_actors[gpu]
        if len(actors) == 1:
            return self.tracks[actors[0]]
        return _merge_tracks([self.tracks[a] for a in actors])


def _merge(tracks: list[list[Interval]]) -> list[Interval]:
    """`_merge_tracks` on lists of intervals."""
    return _merge_tracks([Track.of(tr) for tr in tracks]).intervals()


def _merge_tracks(tracks: list[Track]) -> Track:
    """Priority merge of actor tracks that each tile [0, end], on interval arrays.

    Between consecutive cuts (every interval start, and each track's end) the GPU shows the
    first track that is busy there, else the first track's state; neighbouring pieces of the
    same state and step join (keeping the last piece's version).
    """
    tracks = [tr for tr in tracks if len(tr)]
    out = Track()
    if not tracks:
        return out
    starts = [np.array(tr.start_s, dtype=float) for tr in tracks]
    ends = [np.array(tr.end_s, dtype=float) for tr in tracks]
    cuts = np.unique(np.concatenate([*starts, np.array([e[-1] for e in ends])]))
    a = cuts[:-1]
    if not len(a):
        return out
    # the interval each track holds at each piece's start: the first that ends after it
    held = [np.minimum(np.searchsorted(e, a, side="right"), len(e) - 1) for e in ends]
    chosen_track = np.zeros(len(a), dtype=np.int64)
    undecided = np.ones(len(a), dtype=bool)
    for i, tr in enumerate(tracks):
        busy = np.fromiter((state in BUSY_STATES for state in tr.states), bool, len(tr))[held[i]]
        take = undecided & busy
        chosen_track[take] = i
        undecided &= ~take
    states, steps, versions = out.states, out.steps, out.versions
    first = []  # the pieces that start an interval (each later piece of the same state and step extends it)
    last = []  # the last piece of each interval
    for j, (t, k) in enumerate(zip(chosen_track.tolist(), _held_at(held, chosen_track), strict=True)):
        tr = tracks[t]
        state, step = tr.states[k], tr.steps[k]
        if states and states[-1] == state and steps[-1] == step:
            versions[-1] = tr.versions[k]
            last[-1] = j
        else:
            states.append(state)
            steps.append(step)
            versions.append(tr.versions[k])
            first.append(j)
            last.append(j)
    lo, hi = a.tolist(), cuts[1:].tolist()
    out.start_s.extend([lo[j] for j in first])
    out.end_s.extend([hi[j] for j in last])
    return out


def _held_at(held: list[np.ndarray], chosen: np.ndarray) -> list[int]:
    """For each piece, the index of the interval its chosen track holds there."""
    return np.choose(chosen, held).tolist() if len(held) <= 32 else [int(held[t][j]) for j, t in enumerate(chosen)]
