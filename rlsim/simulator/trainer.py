"""The trainer: takes B complete groups per RL step, trains, publishes the new policy.

Step s trains policy version s into s+1. It takes groups from the buffer in completion order;
under the `reject` staleness policy a group whose oldest sample started more than `max_lag`
versions ago is dropped (its tokens counted as waste) and replaced by a fresh prompt. Then the
phases run back to back on every training GPU: old-logprob / reference / critic forwards
(`logprob`), forward+backward (`train`), the optimizer steps (`optimizer`); every `every_steps`
steps the new weights go out (`sync`). Colocated trainers also switch the GPUs from generation
to training and back (`switch`) and release the next batch only after switching back.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import simpy

from rlsim.errors import ScenarioError
from rlsim.scenario import StalenessPolicy
from rlsim.simulator import states
from rlsim.simulator.buffer import RolloutBuffer
from rlsim.simulator.costs import Costs
from rlsim.simulator.recorder import Recorder, StepRecord
from rlsim.simulator.weight_bus import WeightBus
from rlsim.simulator.work import Group, Sequence


@dataclass(frozen=True)
class TrainerConfig:
    steps: int
    prompts_per_step: int
    policy: StalenessPolicy
    max_lag: int
    sync_every: int
    colocated: bool
    by_completion: bool  # streaming: train on the first complete groups, not batch by batch
    padded: bool = False  # every sample costs the step's longest (training.padding: batch_longest)
    overhead_s: float = 0.0  # controller host work per step; the training GPUs wait (training.step_overhead_s)
    minibatch_groups: int = 0  # >0: take and train this many groups at a time, by completion (stream_minibatches)


class Trainer:
    """The training pool as one actor (all its GPUs move in lockstep)."""

    def __init__(
        self,
        env: simpy.Environment,
        name: str,
        cfg: TrainerConfig,
        costs: Costs,
        buffer: RolloutBuffer,
        bus: WeightBus,
        rec: Recorder,
        dispatcher,
        shared_gpus: simpy.Resource | None = None,
    ) -> None:
        self.env, self.name, self.cfg, self.costs = env, name, cfg, costs
        self.buffer, self.bus, self.rec, self.dispatcher = buffer, bus, rec, dispatcher
        self.shared_gpus = shared_gpus  # held from a step's start to its weight push (a reward model shares them)

    def _phase(self, state: str, seconds: float, step: int):
        if seconds > 0:
            self.rec.on_state(self.name, state, self.env.now, step, step)
            yield self.env.timeout(seconds)

    def _take_batch(self, step: int, count: int | None = None):
        """Wait for `count` (default B) acceptable groups; under `reject`, look at each as it completes,
        dropping and replacing stale ones at once."""
        batch: list[Group] = []
        reject = self.cfg.policy is StalenessPolicy.reject
        count = count or self.cfg.prompts_per_step
        by_completion = self.cfg.by_completion or self.cfg.minibatch_groups > 0
        while len(batch) < count:
            need = 1 if reject else count - len(batch)
            groups = yield self.buffer.take(None if by_completion else step, need)
            for group in groups:
                if reject and step - group.version_start > self.cfg.max_lag:
                    self._guard_livelock()
                    group.status = "dropped"
                    self.rec.on_drop(group.response_tokens)
                    self.dispatcher.replace(1, group.batch)
                    continue
                group.status = "trained"
                batch.append(group)
        return batch

    def _guard_livelock(self) -> None:
        """A pipeline that rejects nearly everything would spin forever; say so instead."""
        if self.rec.dropped_groups > 50 * self.cfg.steps * self.cfg.prompts_per_step:
            raise ScenarioError(
                "pipeline.staleness.max_lag",
                f"max_lag={self.cfg.max_lag} rejects almost every sample this pipeline makes; raise it "
                "or lower buffer_depth",
            )

    def run(self):
        """Process: `steps` RL steps."""
        for step in range(self.cfg.steps):
            self.rec.on_state(self.name, states.IDLE_DATA, self.env.now, step, step)
            if self.cfg.minibatch_groups:
                batch, start, lock = yield from self._train_streamed(step)
            else:
                batch = yield from self._take_batch(step)
                lock = self.shared_gpus.request() if self.shared_gpus is not None else None
                if lock is not None:  # a scoring forward on these GPUs finishes first
                    yield lock
                start = self.env.now
                if self.cfg.overhead_s > 0:  # the controller prepares the batch; the GPUs still wait for it
                    yield self.env.timeout(self.cfg.overhead_s)
                yield from self._train(step, list(map(_length, (s for g in batch for s in g.sequences))))
            samples = [s for g in batch for s in g.sequences]
            lengths = list(map(_length, samples))
            version = step + 1
            if not self.cfg.colocated:
                self.bus.advance(version)
            if version % self.cfg.sync_every == 0 or version == self.cfg.steps:
                yield from self._sync(step, version)
            if self.cfg.colocated:
                self.bus.advance(version)
            if lock is not None:
                self.shared_gpus.release(lock)
            self._record_step(step, start, batch, samples, lengths)
        self.rec.on_state(self.name, states.IDLE_DATA, self.env.now, self.cfg.steps, self.cfg.steps)

    def _train(self, step: int, lengths: list[int]):
        """The step's phases on samples of `lengths` (prompt + response tokens each)."""
        if self.cfg.padded:
            lengths = [max(lengths)] * len(lengths)
        phases = self.costs.train_phases(lengths)
        yield from self._phase(states.SWITCH, self.costs.switch_s, step)
        yield from self._phase(states.LOGPROB, phases.logprob_s, step)
        yield from self._phase(states.TRAIN, phases.train_s, step)
        yield from self._phase(states.OPTIMIZER, phases.optimizer_s, step)

    def _train_streamed(self, step: int):
        """The step minibatch by minibatch, each trained once its groups are complete; returns the
        step's groups, when its first minibatch began, and the shared-GPU lock it holds from then to
        the weight push (a reward model on these GPUs waits, as for a whole step)."""
        batch: list[Group] = []
        start = lock = None
        for index in range(self.cfg.prompts_per_step // self.cfg.minibatch_groups):
            self.rec.on_state(self.name, states.IDLE_DATA, self.env.now, step, step)
            groups = yield from self._take_batch(step, self.cfg.minibatch_groups)
            if start is None:
                if self.shared_gpus is not None:  # a scoring forward on these GPUs finishes first
                    lock = self.shared_gpus.request()
                    yield lock
                start = self.env.now
                if self.cfg.overhead_s > 0:
                    yield self.env.timeout(self.cfg.overhead_s)
            phases = self.costs.minibatch_phases([s.length for g in groups for s in g.sequences], index == 0)
            yield from self._phase(states.LOGPROB, phases.logprob_s, step)
            yield from self._phase(states.TRAIN, phases.train_s, step)
            yield from self._phase(states.OPTIMIZER, phases.optimizer_s, step)
            batch.extend(groups)
        return batch, start, lock

    def _sync(self, step: int, version: int):
        """Push weights; a colocated trainer does the whole reshard itself, then switches back."""
        start = self.env.now
        if self.cfg.colocated:
            yield from self._phase(states.SYNC, self.costs.sync_s, step)
            self.rec.on_sync(start, self.env.now, version)
            yield from self._phase(states.SWITCH, self.costs.switch_s, step)
            self.bus.publish(version, 0.0)
        else:
            self.bus.publish(version, self.costs.sync_s)
            yield from self._phase(states.SYNC, self.costs.sync_s, step)
            self.rec.on_sync(start, self.env.now, version)

    def _record_step(
        self, step: int, start: float, batch: list[Group], samples: list[Sequence], lengths: list[int]
    ) -> None:
        starts = list(map(_version_start, samples))
        responses = list(map(_response_tokens, samples))
        n = len(samples)
        self.rec.on_step(
            StepRecord(
                step=step,
                start_s=start,
                end_s=self.env.now,
                groups=len(batch),
                samples=n,
                tokens=sum(lengths),
                response_tokens=sum(responses),
                lag_mean=(n * step - sum(starts)) / n,
                lag_max=step - min(starts),
                response_lengths=tuple(responses),
            )
        )


# the per-sample fields a step reads, in one C-level pass each
_length = operator.attrgetter("length")
_version_start = operator.attrgetter("version_start")
_response_tokens = operator.attrgetter("response_tokens")
