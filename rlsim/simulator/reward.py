"""The reward pool: CPU verifier workers that score finished completions.

A group becomes trainable only when all G of its completions are scored (the group barrier);
then it goes to the rollout buffer (through the dynamic-sampling filter first, when on). Verifier
time delays groups but occupies no GPU.

Every sample takes the same verifier time, so a first-come-first-served pool of W workers has a
closed form: a sample starts when it arrives or when the earliest worker frees up, whichever is
later. The pool keeps the workers' free times in a heap and schedules one event per group (its
last score) instead of a SimPy process per sample; the timeline is the same as a
`simpy.Resource(capacity=W)` served in arrival order. It is one `Scorer` (scoring.py). Samples
arrive through the finish ledger (finishes.py), in order of their finish times, possibly a
little after them.
"""

from __future__ import annotations

import heapq

import simpy

from rlsim.simulator.finishes import timeout_at
from rlsim.simulator.work import Group, Sequence


class RewardPool:
    """Scores sequences with `workers` parallel verifiers of `seconds_per_sample` each."""

    def __init__(self, env: simpy.Environment, buffer, *, seconds_per_sample: float, workers: int) -> None:
        self.env, self.buffer = env, buffer
        self.seconds = seconds_per_sample
        self._free_at = [0.0] * workers  # heap of the time each worker is next free

    @property
    def wake_delay_s(self) -> float:
        """The verifier time per sample: a group completes no sooner after its last finish (`Scorer`)."""
        return self.seconds

    def submit(self, seqs: list[Sequence]) -> None:
        """Score `seqs`, in order of their finish times (at or before now: engines commit lazily).

        Identical service times make the earliest-free worker the one that started earliest,
        but the heap states that without relying on it.
        """
        seconds, free_at, replace, scored = self.seconds, self._free_at, heapq.heapreplace, self._scored
        if seconds > 0:
            for seq in seqs:
                done, first = seq.finish_s, free_at[0]
                done = (first if first > done else done) + seconds
                replace(free_at, done)
                group = seq.group
                if done > group.done_at:
                    group.done_at = done
                group.scored = n = group.scored + 1
                if n == group.size:
                    scored(group)
            return
        for seq in seqs:  # no verifier time: a sample is scored as it finishes
            group, done = seq.group, seq.finish_s
            if done > group.done_at:
                group.done_at = done
            group.scored = n = group.scored + 1
            if n == group.size:
                scored(group)

    def _scored(self, group: Group) -> None:
        """Every completion of `group` is scored (or will be at `done_at`): on to the buffer.

        The group reaches the buffer at `done_at` exactly (`timeout_at`): `env.timeout(done_at -
        now)` fires at `now + (done_at - now)`, an ulp off `done_at` for some `now`, and a planned
        engine submits its finishes at a later clock than a span-by-span one does.
        """
        if group.done_at > self.env.now:
            timeout_at(self.env, group.done_at, group).callbacks.append(self._complete)
        else:
            self.buffer.put(group)

    def _complete(self, event: simpy.Event) -> None:
        self.buffer.put(event.value)
