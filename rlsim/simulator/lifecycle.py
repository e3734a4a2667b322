"""Where a sequence goes when an engine is done with it: the one routing point of its lifecycle.

Every sequence an engine finishes, one decode span at a time or committed from a plan, reaches
the finish ledger (finishes.py), which hands it, in time order across engines, to a route.
By default a finished sequence is scored (reward.py), and its group trains once every member
is (`ToScoring`). A feature that gives a sequence a longer life adds a route instead of editing
the batch, the interrupt policies or the engine loop: a multi-turn episode's finished turn goes
to a tool call and comes back to an engine with its observation tokens to prefill (`ToolCalls`,
tools.py); a partial rollout's unfinished sequence, taken out of its batch at a step's end, is
carried into the next step's queue (`CarrySink`, partial.py). A route may also name the planned finishes at which it
wants the ledger to flush (`call_times(plan)`, as `ToolCalls` does: a call starts there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from rlsim.simulator.work import Sequence


class SequenceRoute(Protocol):
    """Decides what happens to finished sequences (a list, in order of finish time)."""

    def finished(self, seqs: list[Sequence]) -> None: ...


class ToScoring:
    """A finished sequence is a finished sample: it goes to scoring (the reward pool)."""

    def __init__(self, score: Callable[[list[Sequence]], None]) -> None:
        self.finished = score  # bound once: the ledger calls it for every batch of finishes


class CarrySink(Protocol):
    """Takes unfinished sequences out of an engine at a step's end (partial rollouts, partial.py).

    `version` is the policy the engine held when they left (their tokens' version); None when they
    come from a queue, not an engine.
    """

    def carried(self, seqs: list[Sequence], version: int | None) -> None: ...


class StepEnding(Protocol):
    """What a partial rollout's step end asks of an engine (engine.py; the tests' reference too)."""

    def end_step(self, sink: CarrySink) -> None:
        """Hand every running and preempted sequence to `sink`, tokens kept, at the next iteration
        boundary (at once when nothing runs)."""
        ...
