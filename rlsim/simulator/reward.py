"""The reward pool: CPU verifier workers that score finished completions.

A group becomes trainable only when all G of its completions are scored (the group barrier);
then it goes to the rollout buffer. Verifier time delays groups but occupies no GPU.
"""

from __future__ import annotations

import simpy

from rlsim.simulator.work import Sequence


class RewardPool:
    """Scores sequences with `workers` parallel verifiers of `seconds_per_sample` each."""

    def __init__(self, env: simpy.Environment, buffer, *, seconds_per_sample: float, workers: int) -> None:
        self.env, self.buffer = env, buffer
        self.seconds = seconds_per_sample
        self.workers = simpy.Resource(env, capacity=workers)

    def submit(self, seq: Sequence) -> None:
        if self.seconds <= 0:
            self._scored(seq)
        else:
            self.env.process(self._score(seq))

    def _score(self, seq: Sequence):
        with self.workers.request() as slot:
            yield slot
            yield self.env.timeout(self.seconds)
        self._scored(seq)

    def _scored(self, seq: Sequence) -> None:
        group = seq.group
        group.scored += 1
        if group.scored == len(group.sequences):
            group.done_at = self.env.now
            self.buffer.put(group)
