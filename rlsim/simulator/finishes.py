"""The finish ledger: finishes engines planned ahead, handed to the reward pool in time order.

An engine in a drain (drain.py) knows when each of its sequences will finish but does not
wake for each one. The ledger commits those planned finishes lazily: `flush(t)` commits every
engine's spans that end at or before t, merged by end time (then engine), so the reward pool
still sees one first-come-first-served stream across engines. Nothing planned at or before
the current time can change any more (an engine can only be cut short at the current time),
so a flush is always safe. Flushes happen where somebody looks:
- where a group's last running member on an engine finishes, plus one verifier time: the
  earliest its group can be scored, and, unless the verifiers are all busy, exactly when it
  is (so one event per group both commits its finishes and completes it, at the exact time);
- when an engine is interrupted or ends its drain, before a span-by-span engine hands on its
  own finishers, before a least-loaded dispatcher reads the engines' loads, and at the end.
A flush at a group's completion, or before a span-by-span engine's own finishers, only hands
finishes on: a refill committed in bulk stamps its finishers there and leaves its engine's
batch, queue and logs unsettled (planned.py `settle_refill`) until a flush for a reader, the
end of its plan, or `settle` (an agent turn back to a busy engine, a planner's look).
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator

import simpy
from simpy.events import NORMAL

from rlsim.simulator.lifecycle import SequenceRoute
from rlsim.simulator.ports import PlanHolder


def delay_until(now: float, t: float) -> float:
    """A delay d with now + d == t where one exists, else the least now + d above t, for t >= now.

    `t - now` alone can miss t by an ulp; the planned times are the exact running sums a
    span-by-span engine would reach, and events must land on them. Some t no delay reaches from
    a `now` far before it: `timeout_at` lands on those.
    """
    d = t - now  # exact when now >= t / 2 (Sterbenz); otherwise d is near t and a step or two fix it
    while now + d < t:
        d = math.nextafter(d, math.inf)
    while now + d > t and now + math.nextafter(d, -math.inf) >= t:
        d = math.nextafter(d, -math.inf)
    return d


def timeout_at(env: simpy.Environment, t: float, value: object = None) -> simpy.Event:
    """An event that fires at time t exactly (t >= now), with `value`, as `env.timeout` would.

    SimPy schedules a timeout at now + delay, and from a `now` far before t no delay may give t
    itself: when now's bits below t's last place sit at half of it, now + d rounds to every other
    float around t (a plan armed at 2.85 s for an end at 174.6978685070164 s lands at
    ...0701644). The span-by-span engine reaches t by its running sum, so the event is put on
    SimPy's queue at t directly in that case (its `_queue` and `_eid`, as `Environment.schedule`
    does; the common case goes through `env.timeout`).
    """
    now = env.now
    d = delay_until(now, t)
    if now + d == t:
        return env.timeout(d, value)
    event = env.event()
    event._ok, event._value = True, value  # triggered, as a Timeout is when it is made
    schedule_at(env, event, t, NORMAL)
    return event


def schedule_at(env: simpy.Environment, event: simpy.Event, t: float, priority: int) -> None:
    """Put a triggered `event` on SimPy's queue at time t exactly (t >= now), with `priority`.

    `Environment.schedule(event, priority, delay)` lands at now + delay, an ulp off t for some
    clocks (`timeout_at`); this takes the delay that lands on t where one exists and otherwise
    pushes the event at t as `schedule` itself does.
    """
    d = delay_until(env.now, t)
    if env.now + d == t:
        env.schedule(event, priority, d)
    else:
        heapq.heappush(env._queue, (t, priority, next(env._eid), event))


class FinishLedger:
    """Commits the engines' planned finishes to `route` (lifecycle.py), in time order.

    `deliver` hands a list of finished sequences, in order of finish time, to the route; a
    span-by-span engine calls it for its own finishers after a flush.
    """

    def __init__(self, env: simpy.Environment, route: SequenceRoute, score_s: float = 0.0) -> None:
        self.env, self.route = env, route
        self.deliver = route.finished
        # the planned finishes at which the route wants a flush (an agent turn's tool call starts there)
        self._call_times = getattr(route, "call_times", None)
        self.score_s = score_s  # the verifier's time per sample: no group completes sooner after its last finish
        self.engines: list[PlanHolder] = []  # in engine order (ties at one time commit in this order)
        self._draining: list[PlanHolder] = []  # the engines in a drain, in engine order: the only ones flushed
        # (settle, engine, plan) of plans committed lazily whose engine's batch is not up to date (`settle`)
        self._unsettled: list[tuple] = []

    @property
    def reads_whole_plans(self) -> bool:
        """The route wants flushes at planned finishes it reads from each plan (`call_times`), so
        an engine plans whole rather than in chunks (refill.py's `LazyPlan`)."""
        return self._call_times is not None

    def attach(self, engine: PlanHolder) -> None:
        """An engine whose plans this ledger commits (engines attach in engine order)."""
        self.engines.append(engine)

    def watch(self, engine, drain) -> None:
        """Flush when the groups whose last members finish at `drain.wake_s` can first be scored.

        One wake-up is outstanding per drain, each arming the next, so a drain that is cut
        short (and replanned) leaves at most one stale event behind, which does nothing.
        """
        if engine not in self._draining:
            self._draining = sorted(self._draining + [engine], key=self.engines.index)
        self._arm(engine, drain, 0)
        if self._call_times is not None:
            times = self._call_times(drain)
            if times:
                self._arm_at(engine, drain, times, 0)

    def unwatch(self, engine) -> None:
        """`engine` has no planned finishes any more (its drain ended or was cut)."""
        self._draining = [e for e in self._draining if e is not engine]

    def _arm(self, engine, drain, i: int) -> None:
        if i < len(drain.wake_s):
            t = drain.wake_s[i]
            if self.score_s > 0:
                t += self.score_s  # the reward pool's own arithmetic, so the wake lands on its completion
            timeout_at(self.env, t, (engine, drain, i)).callbacks.append(self._wake)

    def _arm_at(self, engine, plan, times: list[float], i: int) -> None:
        """Flush at each of `times` while `plan` is the engine's (one wake-up outstanding)."""
        timeout_at(self.env, times[i], (engine, plan, times, i)).callbacks.append(self._wake_at)

    def _wake_at(self, event: simpy.Event) -> None:
        engine, plan, times, i = event.value
        if engine.drain is plan:
            self.flush(self.env.now, settle=False)
            if i + 1 < len(times):
                self._arm_at(engine, plan, times, i + 1)

    def _wake(self, event: simpy.Event) -> None:
        engine, drain, i = event.value
        if engine.drain is drain:
            self.flush(self.env.now, settle=False)
            self._arm(engine, drain, i + 1)

    def defer_settle(self, settle, engine, plan) -> None:
        """`engine`'s batch lags `plan`'s commits until `settle(engine, plan)` (planned.py's bulk commits)."""
        self._unsettled.append((settle, engine, plan))

    def settle(self) -> None:
        """Bring every engine's batch, queue and logs up to its plan's commits (before anything reads them)."""
        if self._unsettled:
            unsettled, self._unsettled = self._unsettled, []
            for settle, engine, plan in unsettled:
                settle(engine, plan)

    def flush(self, t: float, settle: bool = True) -> None:
        """Commit every planned span ending at or before t; finishers go on by time, then engine.

        The engines' batches are settled too, unless `settle` is False: a flush that only hands
        finishes on (at a group's completion, where the reward pool reads the finishers and
        nothing reads the engines), which leaves bulk commits' state for the next reader.
        """
        batches = []
        for engine in self._draining:
            d = engine.drain
            if d is not None and d.next_end_s <= t:
                finishers = engine.commit_until(t)
                if finishers:
                    batches.append(finishers)
        if settle and self._unsettled:
            self.settle()
        if not batches:
            return
        if len(batches) == 1:
            self.deliver(batches[0])
        else:  # each engine's finishers are in time order; a stable sort keeps engine order in ties
            self.deliver(sorted(itertools.chain.from_iterable(batches), key=_finish_time))


_finish_time = operator.attrgetter("finish_s")
