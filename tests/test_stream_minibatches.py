"""A streamed trainer (training.stream_minibatches, verl V1 separate_async) trains each minibatch
as soon as its groups are complete, in completion order across steps: an exact timeline with
hand-set arrivals and phase times, against the whole-step trainer on the same arrivals."""

from __future__ import annotations

import pytest
import simpy

from rlsim.models.train_step import TrainPhases
from rlsim.scenario import StalenessPolicy, load_scenario
from rlsim.simulator.buffer import RolloutBuffer
from rlsim.simulator.trainer import Trainer, TrainerConfig
from rlsim.simulator.weight_bus import WeightBus
from rlsim.simulator.work import Group, Sequence


class _Rec:
    """The recorder calls the trainer and buffer make, kept as a list."""

    def __init__(self) -> None:
        self.states: list[tuple[str, float]] = []
        self.steps = []
        self.dropped_groups = 0

    def on_state(self, actor, state, now, step, version) -> None:
        self.states.append((state, now))

    def on_buffer(self, now, size) -> None: ...

    def on_sync(self, start, end, version) -> None: ...

    def on_step(self, record) -> None:
        self.steps.append(record)


class _Costs:
    """Minibatch phases of 1 s log-prob + 2 s train per group; a whole step the sum; sync 0.5 s."""

    sync_s = 0.5
    switch_s = 0.0

    def __init__(self) -> None:
        self.minibatches: list[tuple[int, bool]] = []

    def minibatch_phases(self, lengths, first):
        self.minibatches.append((len(lengths), first))
        return TrainPhases(logprob_s=1.0 * len(lengths), train_s=2.0 * len(lengths), optimizer_s=0.0)

    def train_phases(self, lengths):
        return TrainPhases(logprob_s=1.0 * len(lengths), train_s=2.0 * len(lengths), optimizer_s=0.0)


def _group(gid: int, batch: int) -> Group:
    group = Group(gid=gid, batch=batch, min_version=0, prompt_tokens=10, size=1)
    group.sequences.append(Sequence(group, 0, 10, 90, 100, version_start=0))
    return group


def _run(minibatch_groups: int, arrivals: list[tuple[float, int]], held_until_s: float = 0.0) -> tuple[list, _Costs]:
    """`held_until_s`: a scorer holds the trainer's GPUs (a reward model on them) until then."""
    env = simpy.Environment()
    shared = simpy.Resource(env, capacity=1) if held_until_s else None
    rec, costs = _Rec(), _Costs()
    buffer = RolloutBuffer(env, rec, 100)
    cfg = TrainerConfig(
        steps=1,
        prompts_per_step=4,
        policy=StalenessPolicy.bound,
        max_lag=8,
        sync_every=1,
        colocated=False,
        by_completion=False,
        minibatch_groups=minibatch_groups,
    )
    trainer = Trainer(env, "trainer", cfg, costs, buffer, WeightBus(env), rec, dispatcher=None, shared_gpus=shared)

    def scorer(env):
        with shared.request() as lock:
            yield lock
            yield env.timeout(held_until_s)

    if shared is not None:
        env.process(scorer(env))

    def arrive(env):
        for gid, (at, batch) in enumerate(arrivals):
            yield env.timeout(at - env.now)
            buffer.put(_group(gid, batch))

    env.process(arrive(env))
    env.process(trainer.run())
    env.run()
    return rec.steps, costs


# groups complete at 1, 2, 10 and 11 s; each minibatch of 2 groups takes 2 x 3 s
ARRIVALS = [(1.0, 0), (2.0, 0), (10.0, 0), (11.0, 0)]


def test_each_minibatch_trains_once_its_groups_are_complete() -> None:
    steps, costs = _run(2, ARRIVALS)
    # first minibatch from 2 to 8 s, the second waits for its groups (11 s), trains to 17 s, sync 0.5 s
    assert steps[0].start_s == pytest.approx(2.0)
    assert steps[0].end_s == pytest.approx(17.5)
    assert costs.minibatches == [(2, True), (2, False)]


def test_the_whole_step_trainer_waits_for_every_group() -> None:
    steps, _ = _run(0, ARRIVALS)
    # all four groups at 11 s, then 4 x 3 s of training and the sync
    assert steps[0].start_s == pytest.approx(11.0)
    assert steps[0].end_s == pytest.approx(23.5)


def test_a_streamed_trainer_waits_for_a_scorer_on_its_gpus() -> None:
    # a reward model holds the training GPUs until 5 s: the first minibatch (ready at 2 s) starts then
    steps, _ = _run(2, ARRIVALS, held_until_s=5.0)
    assert steps[0].start_s == pytest.approx(5.0)
    assert steps[0].end_s == pytest.approx(17.5)  # the second minibatch still waits for its groups (11 s)


def test_a_streamed_trainer_takes_groups_of_any_step_in_completion_order() -> None:
    # the next step's groups (batch 1) finish first: a streamed trainer takes them, a per-step one would not
    steps, _ = _run(2, [(1.0, 1), (2.0, 1), (3.0, 0), (4.0, 0)])
    assert steps[0].start_s == pytest.approx(2.0)
    assert steps[0].end_s == pytest.approx(2.0 + 6.0 + 6.0 + 0.5)


def test_streaming_minibatches_is_refused_where_it_cannot_run() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="stream_minibatches"):
        load_scenario("default", ["pipeline.mode=colocated", "pipeline.training.stream_minibatches=true"])
    with pytest.raises(ValidationError, match="minibatches=3 must divide"):
        load_scenario(
            "default",
            ["pipeline.mode=async", "pipeline.training.stream_minibatches=true", "algorithm.minibatches=3"],
        )
