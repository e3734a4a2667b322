"""The rollout buffer: complete groups waiting for the trainer, at most (depth + 1) x B of them.

Batch pipelines (sync, one-step-off, bounded async) train step s on exactly the groups of
batch s, as verl does; streaming pipelines train on whatever groups completed first. The
trainer asks for the n groups it still needs and is woken once, when they are all there; until
then they wait in the buffer, as a batch being assembled does in verl. (A `simpy.FilterStore`
did this one group and three events at a time: a tenth of a default simulation's run time.)
The capacity is the batch being assembled plus `depth` batches generated ahead, in groups (a
synchronous pipeline, depth 0, holds only the batch being assembled). The dispatcher's gate
keeps the generator from running further ahead; the recorder keeps the most ever held, and the
invariant tests check it against the capacity.
"""

from __future__ import annotations

from collections import Counter

import simpy

from rlsim.simulator.recorder import Recorder
from rlsim.simulator.work import Group


class RolloutBuffer:
    """Complete groups in completion order, and at most one waiting taker (the trainer)."""

    def __init__(self, env: simpy.Environment, rec: Recorder, capacity_groups: int) -> None:
        self.env, self.rec = env, rec
        self.capacity = capacity_groups
        self.items: list[Group] = []
        self._per_batch: Counter[int] = Counter()
        self._taker: tuple[int | None, int, simpy.Event] | None = None

    def put(self, group: Group) -> None:
        self.items.append(group)
        self._per_batch[group.batch] += 1
        self.record()
        if self._taker is not None:
            self._serve()

    def take(self, batch: int | None, n: int) -> simpy.Event:
        """An event whose value is the first n complete groups of `batch` (of any batch when None),
        in completion order, taken out of the buffer once all n are there."""
        event = self.env.event()
        self._taker = (batch, n, event)
        self._serve()
        return event

    def _serve(self) -> None:
        batch, n, event = self._taker
        if (len(self.items) if batch is None else self._per_batch[batch]) < n:
            return
        self._taker = None
        if batch is None:
            taken, self.items = self.items[:n], self.items[n:]
        else:
            taken, rest = [], []
            for group in self.items:
                (taken if group.batch == batch and len(taken) < n else rest).append(group)
            self.items = rest
        for group in taken:
            self._per_batch[group.batch] -= 1
        self.record()
        event.succeed(taken)

    def record(self) -> None:
        self.rec.on_buffer(self.env.now, len(self.items))
