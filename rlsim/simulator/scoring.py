"""The scoring stage: finished completions in, scored groups out to the rollout buffer.

One interface (`Scorer`) with two implementations: the CPU verifier (`reward.RewardPool`, a
closed-form first-come-first-served pool whose fixed time per sample the finish ledger builds
into its wake-ups) and a GPU model pool (`GpuScorer`: a reward model, a generative judge, a
process reward model or a distillation teacher on its own GPUs or on the trainer's). A third,
`engine_scoring.EngineScoring`, is the queue the inference engines score from when the reward
model shares their GPUs (`with_inference`).

The GPU scorer's time per forward depends on the lengths it scores, so the ledger adds no delay
(`wake_delay_s` = 0): it hands each group over when its last completion finishes, and scoring
engines, one SimPy process each, take the groups waiting in arrival order, whole, up to
`max_batch_sequences` completions per engine turn. An engine's GPUs are in `score` while it
scores and `idle-waiting-for-data` otherwise. On the trainer's GPUs (`with_training`) an engine
scores only while it holds the GPUs' lock, which the trainer holds from the start of a step to
the end of its weight push, so the two never overlap.
"""

from __future__ import annotations

from typing import Protocol

import simpy

from rlsim.simulator import states
from rlsim.simulator.costs import Costs
from rlsim.simulator.recorder import Recorder
from rlsim.simulator.work import Group, Sequence


def arrived(seq: Sequence) -> Group | None:
    """Count a finished completion at a GPU scorer; its group once all its completions are in.

    The count lives on the group (`scored`); the group completes only when its scoring forward
    ends, so `done_at` keeps the latest finish of its completions until then.
    """
    group = seq.group
    group.scored += 1
    if seq.finish_s > group.done_at:
        group.done_at = seq.finish_s
    return group if group.scored == group.size else None


class Scorer(Protocol):
    """What the finish ledger and the pipeline need of a scoring stage."""

    @property
    def wake_delay_s(self) -> float:
        """A fixed delay from a group's last finish to its completion that the ledger may wake at (0: none)."""

    def submit(self, seqs: list[Sequence]) -> None:
        """Score finished completions, given in order of their finish times."""


class GpuScorer:
    """Scoring engines of a GPU model: groups wait in arrival order; each engine takes a batch."""

    wake_delay_s = 0.0

    def __init__(
        self,
        env: simpy.Environment,
        buffer,
        rec: Recorder,
        costs: Costs,
        *,
        max_batch_sequences: int,
        shared_gpus: simpy.Resource | None = None,
    ) -> None:
        self.env, self.buffer, self.rec, self.costs = env, buffer, rec, costs
        self.max_batch = max_batch_sequences
        self.shared_gpus = shared_gpus
        self.waiting: list[Group] = []
        self._idle: list[simpy.Event] = []  # engines waiting for work, first come first woken

    def submit(self, seqs: list[Sequence]) -> None:
        for seq in seqs:
            group = arrived(seq)
            if group is not None:
                self.waiting.append(group)
                if self._idle:
                    self._idle.pop(0).succeed()

    def _take(self) -> list[Group]:
        """Whole groups in arrival order, up to max_batch_sequences completions (at least one group)."""
        batch, n = [], 0
        while self.waiting and (not batch or n + self.waiting[0].size <= self.max_batch):
            group = self.waiting.pop(0)
            batch.append(group)
            n += group.size
        return batch

    def run(self, name: str):
        """Process: one scoring engine, forever (the run ends with the trainer)."""
        while True:
            if not self.waiting:
                wake = self.env.event()
                self._idle.append(wake)
                yield wake
                continue
            batch = self._take()
            lock = self.shared_gpus.request() if self.shared_gpus is not None else None
            if lock is not None:
                yield lock
            self.rec.on_state(name, states.SCORE, self.env.now)
            yield self.env.timeout(self.costs.score_s([s.length for g in batch for s in g.sequences]))
            self.rec.on_state(name, states.IDLE_DATA, self.env.now)
            if lock is not None:
                self.shared_gpus.release(lock)
            for group in batch:
                self.buffer.put(group)
