"""The simulation driver: scenario in, raw results out (no formatting: see rlsim.metrics)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rlsim.placement import Resolved, resolve
from rlsim.scenario import Scenario
from rlsim.simulator.engine import Engine
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


def simulate(scenario: Scenario | Resolved, *, engine_cls: type[Engine] = Engine) -> SimResult:
    """Simulate `scenario.steps` RL steps with engines of `engine_cls` (the tests pass their
    iteration-level reference, tests/reference_engine.py)."""
    res = scenario if isinstance(scenario, Resolved) else resolve(scenario)
    with _collector_paused():
        return _run(res, engine_cls)


def _run(res: Resolved, engine_cls: type[Engine]) -> SimResult:
    w = build(res, engine_cls)
    w.env.process(w.dispatcher.run())
    for engine in w.engines:
        engine.start()
    done = w.env.process(w.trainer.run())
    try:
        w.env.run(until=done)
    except RuntimeError as exc:  # no events left before the trainer finished: a wiring bug
        raise RuntimeError(f"simulation stalled at t={w.env.now:.3f}s after {len(w.recorder.steps)} steps") from exc
    w.ledger.flush(w.env.now)  # finishes planned up to the end count as generated, not in flight
    w.recorder.close(w.env.now)
    in_flight = _in_flight(w)
    for group in w.dispatcher.groups:  # the run's only large reference cycles (group <-> sequences):
        group.sequences = []  # broken, its objects go by reference counting when it returns
    return SimResult(res, w.recorder, in_flight, engine_cls.kind)


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
