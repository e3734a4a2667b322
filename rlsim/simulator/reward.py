"""The reward pool: CPU verifier workers that score finished completions.

A group becomes trainable only when all G of its completions are scored (the group barrier);
then it goes to the rollout buffer. Verifier time delays groups but occupies no GPU.

Every sample takes the same verifier time, so a first-come-first-served pool of W workers has a
closed form: a sample starts when it arrives or when the earliest worker frees up, whichever is
later. The pool keeps the workers' free times in a heap and schedules one event per group (its
last score) instead of a SimPy process per sample; the timeline is the same as a
`simpy.Resource(capacity=W)` served in arrival order.
"""

from __future__ import annotations

import heapq

import simpy

from rlsim.simulator.work import Sequence


class RewardPool:
    """Scores sequences with `workers` parallel verifiers of `seconds_per_sample` each."""

    def __init__(self, env: simpy.Environment, buffer, *, seconds_per_sample: float, workers: int) -> None:
        self.env, self.buffer = env, buffer
        self.seconds = seconds_per_sample
        self._free_at = [0.0] * workers  # heap of the time each worker is next free

    def submit(self, seq: Sequence) -> None:
        now = self.env.now
        group = seq.group
        if self.seconds > 0:
            start = max(now, heapq.heappop(self._free_at))
            heapq.heappush(self._free_at, start + self.seconds)
            group.done_at = max(group.done_at, start + self.seconds)
        else:
            group.done_at = max(group.done_at, now)
        group.scored += 1
        if group.scored == len(group.sequences):
            delay = group.done_at - now
            if delay > 0:
                self.env.timeout(delay).callbacks.append(lambda _ev: self.buffer.put(group))
            else:
                self.buffer.put(group)
