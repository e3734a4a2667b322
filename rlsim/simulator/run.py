"""The simulation driver: scenario in, raw results out (no formatting: see rlsim.metrics)."""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from simpy.core import URGENT, EmptySchedule, StopSimulation
from simpy.events import Event

from rlsim.placement import Resolved, resolve
from rlsim.scenario import Scenario
from rlsim.simulator.engine import Engine
from rlsim.simulator.finishes import schedule_at
from rlsim.simulator.pipeline import build
from rlsim.simulator.recorder import Recorder


@dataclass
class SimResult:
    """What one simulation produced: the resolved scenario and the recorder's contents."""

    resolved: Resolved
    recorder: Recorder
    in_flight_tokens: int  # tokens produced but neither trained nor dropped when the run ended
    engine_kind: str

    @property
    def scenario(self) -> Scenario:
        return self.resolved.scenario


Watch = Callable[[object], "float | str"]  # the world -> the next time to look at it, or why to stop


@dataclass
class Stopped:
    """A simulation its watch stopped before the trainer finished: when, and the watch's reason."""

    at_s: float
    reason: str


def simulate(
    scenario: Scenario | Resolved, *, engine_cls: type[Engine] = Engine, watch: Watch | None = None
) -> SimResult | Stopped:
    """Simulate `scenario.steps` RL steps with engines of `engine_cls` (the tests pass their
    iteration-level reference, tests/reference_engine.py).

    `watch`, if given, is called with the world (`pipeline.build`'s) at time 0 and then at each
    time it returns; it returns the next time to look (math.inf: never again) or a reason to stop,
    and then a `Stopped` comes back instead of a result. Looking changes nothing: the run stops at
    those times before any event due then (a SimPy stop event of higher priority, as
    `Environment.run(until=t)` schedules) and goes on with the same events in the same order.
    """
    res = scenario if isinstance(scenario, Resolved) else resolve(scenario)
    with _collector_paused():
        return _run(res, engine_cls, watch)


def _run(res: Resolved, engine_cls: type[Engine], watch: Watch | None = None) -> SimResult | Stopped:
    w = build(res, engine_cls)
    w.env.process(w.dispatcher.run())
    for engine in w.engines:
        engine.start()
    done = w.env.process(w.trainer.run())
    try:
        stopped = _advance(w, done, watch)
    except RuntimeError as exc:  # no events left before the trainer finished: a wiring bug
        raise RuntimeError(f"simulation stalled at t={w.env.now:.3f}s after {len(w.recorder.steps)} steps") from exc
    if stopped is not None:
        for group in w.dispatcher.groups:
            group.sequences = []
        return Stopped(w.env.now, stopped)
    w.ledger.flush(w.env.now)  # finishes planned up to the end count as generated, not in flight
    w.recorder.close(w.env.now)
    in_flight = _in_flight(w)
    for group in w.dispatcher.groups:  # the run's only large reference cycles (group <-> sequences):
        group.sequences = []  # broken, its objects go by reference counting when it returns
    return SimResult(res, w.recorder, in_flight, engine_cls.kind)


def _advance(w, done, watch: Watch | None) -> str | None:
    """Run until the trainer is done, looking at the world when `watch` asks; None, or why it stopped."""
    env = w.env
    if watch is None:
        env.run(until=done)
        return None
    finished = []

    def stop(event: Event) -> None:
        finished.append(event is done)
        raise StopSimulation(None)

    done.callbacks.append(stop)  # last, as `Environment.run(until=done)` appends its own
    w.ledger.settle()  # the engines' batches as of the last flush (bulk commits wait to be settled)
    at = watch(w)
    while not isinstance(at, str):
        if at < math.inf:
            if not at > env.now:
                raise ValueError(f"watch asked to look at t={at} s, not after now ({env.now} s)")
            pause = Event(env)
            pause._ok, pause._value = True, None
            schedule_at(env, pause, at, URGENT)  # at `at` exactly, before anything else due then
            pause.callbacks.append(stop)
        try:
            while True:
                env.step()
        except StopSimulation:
            if finished[-1]:
                return None
        except EmptySchedule:
            raise RuntimeError("no events left before the trainer finished") from None
        w.ledger.settle()
        at = watch(w)
    return at


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection during a run.

    A default simulation creates ~25,000 objects (sequences, groups, plans, events) that all
    live until the run ends, so the collector, triggered every few hundred allocations, only
    walks them again and again: a quarter of the run time, freeing nothing. Objects freed
    mid-run go by reference counting as usual, and the run breaks its own cycles (a group and
    its sequences) before it returns.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _in_flight(w) -> int:
    """Tokens held by sequences neither trained nor dropped when the run ended (counted apart)."""
    for engine in w.engines:
        engine.sync_running()
    pending = [s for g in w.dispatcher.groups if g.status == "pending" for s in g.sequences]
    # an agent episode's earlier turns count too (tools.py: the sequence holds its current turn's)
    return sum(s.generated for s in pending) + sum(s.episode.done_tokens for s in pending if s.episode is not None)
