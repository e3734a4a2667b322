"""Scoring on the inference engines: a reward model placed `with_inference`.

The reward model (or generative judge, process reward model, teacher) shares each inference
engine's GPUs and TP group, its weights resident beside the policy's (placement.py takes them
out of the engine's KV room). Scoring and generation never run at the same time on an engine:
an engine scores only when it has nothing to generate, at the point where it would otherwise
wait idle (no running sequence, nothing queued that it may admit). That is verl's rule for a
reward model without a resource pool of its own: the trainer generates the batch, puts the
rollout replicas to sleep, then scores it on the same GPUs
(volcengine/verl@b178a3cd:verl/trainer/ppo/ray_trainer.py, `compute_rm_score` after
`generate_sequences`; verl/experimental/reward_loop/reward_loop.py, `RewardLoopManager.compute_rm_score`
wakes the reward model, scores, sleeps it), and asynchronous reward is only enabled with a
separate pool (verl/experimental/agent_loop/agent_loop.py, `_compute_score`:
`enable_async_reward` needs `reward_model.enable_resource_pool`). So in sync and colocated
modes the engines generate the step's batch, then score it; in the asynchronous modes an engine
scores once its batch has drained and the queue holds nothing it may start, and new generation
work waiting at that point goes first.

Completed groups wait in one queue shared by the engines, in arrival order (verl splits the
batch over all reward-model replicas): an idle engine takes whole groups, up to
`max_batch_sequences` completions per forward, and its GPUs are in `score` for the forward's
time (`Costs.score_s`). Every idle engine hears of a new group; the first to look takes it.
The rollout replicas' and the reward model's sleep/wake-up times are not modelled (the weights
stay resident).
"""

from __future__ import annotations

import simpy

from rlsim.simulator.scoring import arrived
from rlsim.simulator.work import Group, Sequence


class EngineScoring:
    """The scoring queue of the inference engines (a `Scorer`, scoring.py; a `ScoringSource`, ports.py)."""

    wake_delay_s = 0.0  # the time a forward takes depends on its lengths: the ledger adds no delay

    def __init__(self, env: simpy.Environment, buffer, *, max_batch_sequences: int) -> None:
        self.env, self.buffer = env, buffer
        self.max_batch = max_batch_sequences
        self.waiting: list[Group] = []
        self._arrival: simpy.Event | None = None

    def submit(self, seqs: list[Sequence]) -> None:
        """Finished completions (in order of their finish times); a group waits once all are in."""
        for seq in seqs:
            group = arrived(seq)
            if group is not None:
                self.waiting.append(group)
                if self._arrival is not None:
                    self._arrival, ev = None, self._arrival
                    ev.succeed()

    def arrival(self) -> simpy.Event:
        """An event that fires when the next group is ready to score (shared by the idle engines)."""
        if self._arrival is None:
            self._arrival = self.env.event()
        return self._arrival

    def take(self) -> list[Group]:
        """Whole groups in arrival order, up to max_batch_sequences completions (at least one group)."""
        batch, n, waiting = [], 0, self.waiting
        while waiting and (not batch or n + waiting[0].size <= self.max_batch):
            group = waiting.pop(0)
            batch.append(group)
            n += group.size
        return batch

    def scored(self, batch: list[Group]) -> None:
        """The forward over `batch` has ended: its groups go on to the buffer (or the filter)."""
        for group in batch:
            self.buffer.put(group)


def forward_lengths(batch: list[Group]) -> list[int]:
    """The full lengths (prompt + response) a scoring forward over `batch` reads, in order."""
    return [s.length for g in batch for s in g.sequences]
