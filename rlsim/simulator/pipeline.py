"""Wiring the processes for a pipeline mode. Every mode uses the same processes.

Disaggregated modes differ only in their knobs (sync is the async pipeline with depth 0;
one-step-off has depth 1; streaming pulls prompts and updates in flight). Colocated mode puts
the engines and the trainer on the same GPUs: the recorder lists the trainer first on every
GPU, so a GPU shows training work while the trainer is busy and the engines' otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from rlsim.placement import Resolved
from rlsim.pools import INFERENCE, REWARD, TRAINING, pool_named
from rlsim.scenario import Dispatch, KvDuringToolWait, Mode, Padding, Refill, Scenario
from rlsim.simulator.buffer import RolloutBuffer
from rlsim.simulator.costs import Costs
from rlsim.simulator.dispatcher import Dispatcher, WorkQueue
from rlsim.simulator.dynamic_sampling import AllOrNoneDraws, DynamicSampling
from rlsim.simulator.engine import Engine
from rlsim.simulator.engine_scoring import EngineScoring
from rlsim.simulator.finishes import FinishLedger
from rlsim.simulator.lifecycle import ToScoring
from rlsim.simulator.partial import CarryingDispatcher, PartialRollouts
from rlsim.simulator.recorder import AgentTally, FilterLog, Recorder
from rlsim.simulator.reward import RewardPool
from rlsim.simulator.scoring import GpuScorer, Scorer
from rlsim.simulator.states import IDLE_DATA, IDLE_WEIGHTS
from rlsim.simulator.tools import ToolCalls
from rlsim.simulator.trainer import Trainer, TrainerConfig
from rlsim.simulator.weight_bus import WeightBus
from rlsim.workload import GroupSampler, mean_length


@dataclass
class Wiring:
    """The processes of one simulation, for the driver to run and inspect."""

    env: simpy.Environment
    recorder: Recorder
    trainer: Trainer
    engines: list[Engine]
    dispatcher: Dispatcher
    buffer: RolloutBuffer
    costs: Costs
    ledger: FinishLedger


def _schedule(res: Resolved):
    sc = res.scenario
    sched = sc.workload.length_schedule
    if sched is None:
        return None
    span = max(1, sc.steps - 1)
    return lambda s: sched.start_mean + (sched.end_mean - sched.start_mean) * s / span


def _engines(
    env,
    res: Resolved,
    engine_cls,
    costs: Costs,
    rec: Recorder,
    ledger: FinishLedger,
    bus: WeightBus,
    queues: list[WorkQueue],
    scoring: EngineScoring | None = None,
) -> list:
    """The inference engines (one TP group each), each taking work from its queue (`_queues`).

    Each engine attaches itself to its queue, the ledger and the bus when built (ports.py); with a
    reward model on their GPUs they all serve its scoring queue (engine_scoring.py).
    """
    pipe = res.scenario.pipeline
    shared = pipe.dispatch is Dispatch.pull
    n, tp = res.scenario.engines, pipe.inference.tp
    gpu_ids = pool_named(res.pools, INFERENCE).gpu_ids
    engines = []
    for e in range(n):
        name, queue = f"engine{e}", queues[0 if shared else e]
        rec.add_actor(name, INFERENCE, list(gpu_ids[e * tp : (e + 1) * tp]), IDLE_WEIGHTS)
        engine = engine_cls(
            env,
            name,
            costs,
            queue,
            rec,
            ledger,
            bus,
            capacity_tokens=res.kv_capacity_tokens,
            max_batch=pipe.inference.max_batch,
            interrupt=pipe.interrupt,
            share_prompt_prefill=pipe.inference.keep_groups_together,
            scoring=scoring,
        )
        engines.append(engine)
    return engines


def _queues(env, res: Resolved) -> list[WorkQueue]:
    """The engines' work queues: one they all pull from, or one per engine (a fixed split)."""
    if res.scenario.pipeline.dispatch is Dispatch.pull:
        return [WorkQueue(env)]
    return [WorkQueue(env) for _ in range(res.scenario.engines)]


def _dynamic_sampling(env, res: Resolved, buffer: RolloutBuffer, rec: Recorder) -> DynamicSampling | None:
    """The DAPO filter between scoring and the buffer, when the scenario asks for it."""
    sc = res.scenario
    fg = sc.algorithm.filter_groups
    if fg is None:
        return None
    rec.filtering = FilterLog()
    return DynamicSampling(
        env,
        buffer,
        rec.filtering,
        AllOrNoneDraws(fg, sc.algorithm.group_size, sc.seed),
        prompts_per_step=sc.algorithm.prompts_per_step,
        prompts_per_gen_batch=fg.prompts_per_gen_batch or sc.algorithm.prompts_per_step,
        max_rounds=fg.max_num_gen_batches,
        continuous=fg.refill_for(sc.pipeline.mode) is Refill.continuous,
    )


def _dispatcher(
    env,
    res: Resolved,
    queues: list[WorkQueue],
    bus: WeightBus,
    ledger: FinishLedger,
    sampling: DynamicSampling | None = None,
    partial: PartialRollouts | None = None,
) -> Dispatcher:
    sc = res.scenario
    agent = sc.workload.agent
    sampler = GroupSampler(sc, np.random.default_rng(sc.seed))
    sched = _schedule(res)
    if sched is not None:
        mean_length(sc.workload.response_tokens, sampler.base_dir)  # fail early on a bad file
    cls, extra = Dispatcher, {}
    if partial is not None:
        n = sc.pipeline.partial_rollout.prompts_in_flight(sc.algorithm.prompts_per_step)
        cls, extra = CarryingDispatcher, {"partial": partial, "prompts_in_flight": n}
    return cls(
        env,
        sampler,
        queues,
        bus,
        prompts_per_step=sc.algorithm.prompts_per_step,
        depth=sc.pipeline.depth,
        steps=sc.steps,
        sync_every=sc.pipeline.weight_sync.every_steps,
        policy=sc.pipeline.dispatch,
        keep_groups_together=sc.pipeline.inference.keep_groups_together,
        schedule=sched,
        ledger=ledger,
        sampling=sampling,
        staleness_threshold=sc.pipeline.staleness_threshold,
        kv_kept=agent is not None and agent.kv_cache is KvDuringToolWait.kept,
        **extra,
    )


def _scorer(
    env, res: Resolved, buffer: RolloutBuffer, rec: Recorder, costs: Costs
) -> tuple[Scorer, simpy.Resource | None]:
    """The scoring stage: the CPU verifier, a GPU model's engines (started here) on their pool, or the
    inference engines' scoring queue (a reward model placed with_inference).

    Returns the scorer and, for a reward model on the trainer's GPUs, the lock they share.
    """
    sc = res.scenario
    if res.scoring is None:
        return RewardPool(
            env, buffer, seconds_per_sample=sc.workload.reward.seconds_per_sample, workers=sc.workload.reward.workers
        ), None
    if res.scoring.pool == INFERENCE:  # the inference engines score (built with it: `_engines`)
        return EngineScoring(env, buffer, max_batch_sequences=res.scoring.spec.max_batch_sequences), None
    pool, tp = pool_named(res.pools, REWARD), res.scoring.spec.tp
    shared = simpy.Resource(env, capacity=1) if pool.shares == TRAINING else None
    scorer = GpuScorer(
        env, buffer, rec, costs, max_batch_sequences=res.scoring.spec.max_batch_sequences, shared_gpus=shared
    )
    for e in range(pool.gpus // tp):
        name = f"scorer{e}"
        rec.add_actor(name, REWARD, list(pool.gpu_ids[e * tp : (e + 1) * tp]), IDLE_DATA)
        env.process(scorer.run(name))
    return scorer, shared


def _route(env, res: Resolved, reward: Scorer, rec: Recorder, queues: list[WorkQueue]):
    """Where finished sequences go (lifecycle.py): scoring, or tool calls between agent turns.

    Under pull dispatch an episode evicted for its tool call comes back to the one shared queue;
    under a fixed split, to its own engine's.
    """
    agent = res.scenario.workload.agent
    if agent is None:
        return ToScoring(reward.submit)
    rec.agent = AgentTally()
    kept = agent.kv_cache is KvDuringToolWait.kept
    shared = queues[0] if res.scenario.pipeline.dispatch is Dispatch.pull else None
    return ToolCalls(env, reward.submit, rec, kept=kept, environments=agent.environments, shared_queue=shared)


def build(res: Resolved, engine_cls: type[Engine] = Engine) -> Wiring:
    """Create the environment and every process of the scenario's pipeline.

    `engine_cls` builds the inference engines (the tests pass their iteration-level reference);
    it takes `Engine`'s constructor arguments and has its `start`, `sync_running` and the
    interfaces of ports.py.
    """
    sc = res.scenario
    pipe = sc.pipeline
    env, rec, costs = simpy.Environment(), Recorder(), Costs(res)
    bus = WeightBus(env)
    colocated = pipe.mode is Mode.colocated
    train_ids = pool_named(res.pools, TRAINING).gpu_ids
    rec.add_actor("trainer", TRAINING, list(train_ids), IDLE_DATA)  # first: wins when busy

    buffer = RolloutBuffer(env, rec, (pipe.depth + 1) * sc.algorithm.prompts_per_step)
    partial = None
    if pipe.partial_rollout is not None:  # complete groups pass through it: it ends each step at B
        partial = PartialRollouts(env, buffer, rec, sc.algorithm.prompts_per_step)
    sink = buffer if partial is None else partial
    sampling = _dynamic_sampling(env, res, sink, rec)
    reward, shared_gpus = _scorer(env, res, sink if sampling is None else sampling, rec, costs)
    queues = _queues(env, res)
    route = _route(env, res, reward, rec, queues)
    ledger = FinishLedger(env, route, reward.wake_delay_s)
    on_engines = reward if isinstance(reward, EngineScoring) else None
    engines = _engines(env, res, engine_cls, costs, rec, ledger, bus, queues, on_engines)
    if partial is not None:
        partial.attach(ledger, engines, queues)
    dispatcher = _dispatcher(env, res, queues, bus, ledger, sampling, partial)
    cfg = TrainerConfig(
        steps=sc.steps,
        prompts_per_step=sc.algorithm.prompts_per_step,
        policy=pipe.staleness.policy,
        max_lag=pipe.staleness.max_lag,
        sync_every=pipe.weight_sync.every_steps,
        colocated=colocated,
        by_completion=pipe.dispatch is Dispatch.pull,
        padded=pipe.training.padding is Padding.batch_longest,
        overhead_s=pipe.training.step_overhead_s,
        minibatch_groups=_minibatch_groups(sc) if pipe.training.stream_minibatches else 0,
    )
    trainer = Trainer(env, "trainer", cfg, costs, buffer, bus, rec, dispatcher, shared_gpus)
    return Wiring(env, rec, trainer, engines, dispatcher, buffer, costs, ledger)


def _minibatch_groups(sc: Scenario) -> int:
    """Groups in one minibatch of a streamed trainer (the scenario checks that they divide B)."""
    return sc.algorithm.prompts_per_step // sc.algorithm.minibatches
