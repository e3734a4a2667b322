"""The interfaces between an inference engine and the actors around it (typing.Protocol).

An engine takes work from a queue (dispatcher.py), hands planned finishes to the ledger
(finishes.py), receives weights from the bus (weight_bus.py) and, when a reward model shares
its GPUs, scores from a scoring queue (engine_scoring.py); the first three in turn call
back into the engines attached to it. Writing both directions down here lets either side be
replaced (a tool-wait stage that requeues turns, an engine with its own admission rules in the
tests) without reading the other's code, and lets the wiring be explicit: an engine attaches
itself to its queue, its ledger and its bus when it is built, in engine order.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

import simpy

from rlsim.simulator.work import Sequence


class QueueListener(Protocol):
    """What a work queue asks of the engines taking from it."""

    def admission_time(self) -> float | None:
        """The queue changed: when this engine would take its head, if it can now (None: not)."""
        ...

    def cut_for_queue(self) -> None:
        """Take the queue's head at the end of the iteration in progress."""
        ...


class WorkSource(Protocol):
    """The queue an engine admits from (FIFO; the engine pops from `items` as it admits)."""

    items: deque[Sequence]
    running: int  # its engine's sequences, decoding or preempted (static queues; least_loaded)

    def attach(self, engine: QueueListener) -> None: ...

    @property
    def shared(self) -> bool:
        """More than one engine takes from it."""
        ...

    def notify(self) -> None: ...

    def push_front(self, seqs: list[Sequence]) -> None: ...

    def peek(self) -> Sequence | None: ...

    def arrival(self) -> simpy.Event: ...


class PlanHolder(Protocol):
    """What the ledger asks of an engine with planned finishes."""

    drain: object | None  # the plan in progress (a Drain or a Refill), None when none

    def commit_until(self, t: float) -> list[Sequence]:
        """The plan's steps that end by t are done: apply them; returns their finishers."""
        ...


class FinishSink(Protocol):
    """The finish ledger as an engine sees it: finishes go on through it, in time order."""

    def attach(self, engine: PlanHolder) -> None: ...

    def watch(self, engine: PlanHolder, plan: object) -> None: ...

    def unwatch(self, engine: PlanHolder) -> None: ...

    def flush(self, t: float, settle: bool = True) -> None: ...

    @property
    def reads_whole_plans(self) -> bool:
        """The route reads every planned finish up front (agent turns' tool calls): plan whole."""
        ...

    def settle(self) -> None:
        """Bring the engines' batches up to their plans' lazy commits (before reading one)."""
        ...

    def defer_settle(self, settle: object, engine: PlanHolder, plan: object) -> None:
        """`engine`'s batch lags `plan`'s commits until the ledger calls `settle(engine, plan)`."""
        ...

    def deliver(self, finished: list[Sequence]) -> None:
        """Hand finished sequences on (to the route: lifecycle.py), in order of finish time."""
        ...


class WeightReceiver(Protocol):
    """What the weight bus asks of an engine."""

    def deliver(self, version: int, cost_s: float) -> None:
        """New weights: the newest pending version replaces an older one."""
        ...


class WeightSource(Protocol):
    """The weight bus as an engine sees it."""

    def attach(self, engine: WeightReceiver) -> None: ...


class TurnHolder(Protocol):
    """What the tool-call route (tools.py) asks of the engine that last admitted an agent turn."""

    queue: WorkSource  # an evicted episode comes back to this engine's queue (fixed dispatch)

    def park(self, seq: Sequence, tokens: int) -> None:
        """The turn went to a tool call keeping `tokens` of KV cache here."""
        ...

    def resume(self, seq: Sequence) -> None:
        """The turn came back from its tool call, its KV cache still here."""
        ...


class ScoringSource(Protocol):
    """The scoring queue an engine serves when a reward model shares its GPUs (engine_scoring.py)."""

    waiting: list  # groups ready to score, in arrival order

    def arrival(self) -> simpy.Event:
        """Fires when the next group is ready to score."""
        ...

    def take(self) -> list:
        """The groups of the next forward (whole groups, up to the reward model's batch)."""
        ...

    def scored(self, batch: list) -> None:
        """The forward over `batch` has ended: its groups go on."""
        ...
