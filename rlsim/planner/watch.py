"""A lower bound on a candidate's projected run from its simulation under way, and the search's
early stop on it.

The bounded search (`search._branch_and_bound`) skips a candidate whose closed-form bound
(`bounds.run_bound`) the simulated ones already dominate. One it must simulate may still be
settled before its simulation ends: the simulator looks at the world at times this module asks
for (`rlsim.simulator.run.simulate`'s `watch`), and each time the facts so far bound the result
from below more tightly than the closed form did:

- time t has passed and the trainer has not finished: the last step ends at t or later, and the
  steady step time (the mean gap between step ends over the second half of the steps,
  `metrics.summary`) is at least (t - end of step half - 1) / (n - half) once that step ended;
- a sequence an engine has admitted is decoded by that engine to its end: a preempted one waits
  in the engine's own list (`RunningBatch.local`), and only an abort under pull dispatch sends
  one back to the shared queue (left out). Every released sequence is trained before the last
  step ends (each batch whole at its step, or B groups a step of all released). So the last
  step ends no earlier than each engine's decode of the sequences it was given, plus the trainer's
  work after a group completes (`bounds.step_ends`' third figure): for any time
  tau, those released at tau or later take it at least `bounds.DecodeFloor`'s floor of their
  own tokens after tau (one engine decodes one iteration after another), and a group first seen
  at a look was released no earlier than the look before. Where pull dispatch lets the first
  engines take every sequence released at time 0 while the rest idle, this is the bound the
  pooled closed form cannot give;
- a sample's policy version at its start is set when an engine first admits it and never
  changes after (only `abort_discard` resets it, and it is left out): the staleness of every
  started sample is known. When batch s is trained whole at step s (fixed split, no `reject`,
  partial rollouts, dynamic sampling, release quota or agent episodes), a started sample of
  batch s has lag s - its version, and one not started yet at least `bounds.least_lags`. When
  the trainer takes the first complete groups of any batch (pull dispatch, streamed
  minibatches), every released group is still trained once, each step B groups: the lags sum to
  (the sum of the trained steps) - (the sum of the versions at start); a sample not started yet
  is trained at a step not yet ended and starts on a version at most that step (and a multiple
  of the sync interval), so the versions sum to at most the known ones plus, for those not
  started, the largest such caps.

Those floors, through the projection's arithmetic (`metrics.cost.project_points`, one sample
point), give run hours, dollars and staleness at least the closed form's; when simulated
candidates dominate them (`search.skip_reason`, on the results the search could see when it
submitted this one), the simulation stops and the candidate is skipped, as one its closed-form
bound rules out is. Looking at the world changes nothing in it, so a run the watch does not stop
is the run without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlsim.planner.bounds import DecodeFloor, least_lags
from rlsim.scenario import Dispatch, Interrupt, Scenario, StalenessPolicy

LOOK_EVERY = 0.05  # of the closed-form bound on the simulated wall time: how often to look


@dataclass(frozen=True)
class Settle:
    """What a watched simulation may be stopped on: the results the search could see (frontier of
    the feasible ones, the runner-up), its constraints and objective; `skip(bound)` gives why a
    candidate of that bound cannot change the plan (`search.skip_reason`), or None."""

    front: tuple[Any, ...]
    second: Any
    constraints: Any
    objective: str

    def skip(self, b: Any) -> str | None:
        from rlsim.planner.search import skip_reason

        return skip_reason(b, list(self.front), self.second, self.constraints, self.objective)


def watchable(sc: Scenario) -> str | None:
    """How the watch bounds staleness: 'batch' (batch s trained whole at step s), 'pool' (first
    complete groups of any batch, every released group trained once) or None (hours only)."""
    pipe, alg = sc.pipeline, sc.algorithm
    if (
        pipe.staleness.policy is StalenessPolicy.reject
        or pipe.partial_rollout is not None
        or alg.filter_groups is not None
        or pipe.staleness_threshold is not None
        or sc.workload.agent is not None
        or pipe.interrupt is Interrupt.abort_discard
    ):
        return None
    if pipe.dispatch is Dispatch.pull or pipe.training.stream_minibatches:
        return "pool"
    return "batch"


class Watch:
    """The planner's watch over one candidate's simulation (a `simulate` watch: see module doc).

    `bound` is the candidate's closed-form `search.Bound` (its `sim_s`: lower bounds on the
    simulated wall time and steady step time; its `usd_per_hour`: what its GPUs cost an hour)."""

    def __init__(self, sc: Scenario, bound: Any, run_steps: int, settle: Settle) -> None:
        self.n, self.run_steps, self.fill = sc.steps, run_steps, sc.pipeline.depth + 1
        self.half = max(1, self.n // 2)
        self.bound, self.usd_per_hour, self.settle = bound, bound.usd_per_hour, settle
        self.wall_s, self.steady_s = bound.sim_s
        self.every = max(1e-9, LOOK_EVERY * self.wall_s)
        self.kind = watchable(sc)
        self.per_step = sc.algorithm.prompts_per_step * sc.algorithm.group_size
        self.floors = least_lags(sc)
        self.sync_every = sc.pipeline.weight_sync.every_steps
        self._seen = 0  # groups released so far that were looked at
        self._open: list[Any] = []  # released groups with a sample not started at the last look
        self._known = 0  # batch kind: sum of lags; pool kind: sum of versions ... of the samples of
        self._started = 0  # groups whose samples all started, and their number
        self._released_floor = 0  # the least lags of the samples released so far
        self.stop: tuple[float, Any, str] | None = None  # when, the bound, why (once stopped)
        self.engines = _Assigned(sc) if self.kind is not None else None  # each engine's own work

    def __call__(self, w: Any) -> float | str:
        now = w.env.now
        b = self.bound_at(w)
        why = self.settle.skip(b)
        if why is not None:
            self.stop = (now, b, why)
            return f"stopped at t={now:,.0f} s: {why}"
        return now + self.every

    def bound_at(self, w: Any) -> Any:
        """The candidate's `Bound` from the world as it is now (at least the closed-form one)."""
        from rlsim.planner.search import Bound

        hours = max(self.bound.hours, self._run_s(w) / 3600.0)
        stale = self.bound.staleness_mean
        if self.kind is not None and self._could_dominate(hours):
            stale = max(stale, self._staleness(w))
        return Bound(hours, hours * self.usd_per_hour, stale)

    def _could_dominate(self, hours: float) -> bool:
        """Whether these hours and dollars rank after the runner-up and some simulated result is at
        most them (else staleness cannot decide, and counting it is skipped)."""
        second, usd = self.settle.second, hours * self.usd_per_hour
        if second is None:
            return False
        if not (usd > second.run_usd if self.settle.objective == "cost" else hours > second.run_hours):
            return False
        return any(f.run_hours <= hours and f.run_usd <= usd for f in self.settle.front)

    def _run_s(self, w: Any) -> float:
        """A lower bound on the projected run seconds (`project_points`, one point)."""
        now, n, half = w.env.now, self.n, self.half
        ends = [s.end_s for s in w.recorder.steps]
        late = now
        if self.engines is not None:
            self.engines.look(w)
            if n > half and len(ends) >= half:  # before, it would raise only the wall time (run hours: ~0)
                late = max(now, self.engines.decoded_s(w) + self.bound.tail_s)
        wall = max(late, self.wall_s)
        steady = self.steady_s
        if n > half and len(ends) >= half:
            steady = max(steady, (late - ends[half - 1]) / (n - half))
        elif n == half:
            steady = wall
        r = self.run_steps
        if r <= n:
            run = wall * r / n
        elif n >= 2 * self.fill:
            run = wall + (r - n) * steady
        else:
            run = wall * r / n
        return max(0.0, run * (1.0 - 1e-9))

    def _staleness(self, w: Any) -> float:
        """A lower bound on the mean staleness of the simulated run (see module doc)."""
        groups = w.dispatcher.groups
        for g in groups[self._seen :]:
            self._released_floor += self.floors[g.batch] * len(g.sequences)
            self._open.append(g)
        self._seen = len(groups)
        batch = self.kind == "batch"
        still, partial, count = [], 0, 0
        for g in self._open:
            versions = [s.version_start for s in g.sequences]
            started = [v for v in versions if v >= 0]
            if batch:
                lags = sum(g.batch - v for v in started) + (len(versions) - len(started)) * self.floors[g.batch]
            if len(started) == len(versions):
                self._known += lags if batch else sum(started)
                self._started += len(versions)
                continue
            still.append(g)
            if batch:
                partial += lags
            else:
                partial += sum(started)
                count += len(started)
        self._open = still
        n, total = self.n, self.n * self.per_step
        if batch:  # samples not released yet (whole batches, or the rest of one): their least lags
            unreleased = sum(self.floors[s] * self.per_step for s in range(n)) - self._released_floor
            return max(0.0, (self._known + partial + unreleased) / total * (1.0 - 1e-9))
        done = len(w.recorder.steps)
        versions = self._known + partial
        unstarted = total - self._started - count
        caps = []  # the largest version a sample not started may start on, per step not ended
        for t in range(n - 1, done - 1, -1):
            caps.append((t - t % self.sync_every, self.per_step))
        top = 0
        for cap, slots in caps:
            take = min(slots, unstarted)
            top += take * cap
            unstarted -= take
            if unstarted <= 0:
                break
        lag_sum = self.per_step * n * (n - 1) // 2 - versions - top
        return max(0.0, lag_sum / total * (1.0 - 1e-9))


class _Assigned:
    """What each engine was given to decode (see module doc), kept up to date look by look.

    Per engine and release floor tau: the decode steps (tokens after the first), the cached
    tokens they read (`DecodeFloor.seconds`' sum) and the longest response's steps, of the
    sequences it admitted that were released at tau or later."""

    def __init__(self, sc: Scenario) -> None:
        pipe = sc.pipeline
        aborts = pipe.interrupt in (Interrupt.abort_resubmit, Interrupt.abort_discard)
        self.sticky = not (pipe.dispatch is Dispatch.pull and aborts)
        self.max_batch = pipe.inference.max_batch
        self._last_look = 0.0
        self._seen = 0
        self._open: list[tuple[Any, float, list[bool]]] = []  # groups with a sequence not admitted yet
        self._work: dict[int, dict[float, list[float]]] = {}  # engine -> tau -> [steps, cached, longest]
        self._floor: DecodeFloor | None = None

    def look(self, w: Any) -> None:
        """Note the groups released since the last look: no earlier than that look."""
        groups = w.dispatcher.groups
        for g in groups[self._seen :]:
            self._open.append((g, self._last_look, [False] * len(g.sequences)))
        self._seen = len(groups)
        self._last_look = w.env.now

    def decoded_s(self, w: Any) -> float:
        """A lower bound on when the engines have decoded every sequence admitted so far (0: none)."""
        if not self.sticky:
            return 0.0
        work = self._work
        still = []
        for item in self._open:
            g, tau, counted = item
            for i, seq in enumerate(g.sequences):
                if counted[i] or seq.engine is None:
                    continue
                counted[i] = True
                steps = max(seq.response_tokens - 1, 0)
                row = work.setdefault(id(seq.engine), {}).setdefault(tau, [0.0, 0.0, 0.0])
                row[0] += steps
                row[1] += steps * seq.prompt_tokens + steps * (steps - 1) / 2.0
                row[2] = max(row[2], steps)
            if not all(counted):
                still.append(item)
        self._open = still
        if self._floor is None:
            self._floor = DecodeFloor(w.engines[0].costs, self.max_batch, len(w.engines))
        return max((_engine_floor(self._floor, rows) for rows in work.values()), default=0.0)


def _engine_floor(floor: DecodeFloor, rows: dict[float, list[float]]) -> float:
    """max over tau of tau + the floor of one engine's sequences released at tau or later."""
    best, steps, cached, longest = 0.0, 0.0, 0.0, 0.0
    for tau in sorted(rows, reverse=True):
        s, c, top = rows[tau]
        steps, cached, longest = steps + s, cached + c, max(longest, top)
        iterations = max(steps / floor.max_batch, cached / floor.capacity, longest)
        best = max(best, tau + float(floor.floor(np.float64(iterations), steps, cached)))
    return best
