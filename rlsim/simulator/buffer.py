"""The rollout buffer: complete groups waiting for the trainer, at most (depth + 1) x B of them.

Batch pipelines (sync, one-step-off, bounded async) train step s on exactly the groups of
batch s, as verl does; streaming pipelines train on whatever groups completed first. A
`simpy.FilterStore` serves both. Its capacity is the batch being assembled plus `depth`
batches generated ahead, in groups (a synchronous pipeline, depth 0, holds only the batch
being assembled). The dispatcher's gate keeps the generator from running further ahead, so a
put never waits in practice; the recorder checks the bound.
"""

from __future__ import annotations

import simpy

from rlsim.simulator.recorder import Recorder
from rlsim.simulator.work import Group


class RolloutBuffer:
    """FIFO of complete groups, in completion order."""

    def __init__(self, env: simpy.Environment, rec: Recorder, capacity_groups: int) -> None:
        self.env, self.rec = env, rec
        self.capacity = capacity_groups
        self.store = simpy.FilterStore(env, capacity=capacity_groups)

    def put(self, group: Group) -> None:
        self.store.put(group).callbacks.append(lambda _ev: self.record())

    def get(self, batch: int | None) -> simpy.Event:
        """The next complete group of `batch`, or the next of any batch when None."""
        if batch is None:
            return self.store.get()
        return self.store.get(lambda g: g.batch == batch)

    def record(self) -> None:
        self.rec.on_buffer(self.env.now, len(self.store.items))
