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
from rlsim.scenario import Dispatch, KvDuringToolWait, Mode, Padding
from rlsim.simulator.buffer import RolloutBuffer
from rlsim.simulator.costs import Costs
from rlsim.simulator.dispatcher import Dispatcher, WorkQueue
from rlsim.simulator.engine import Engine
from rlsim.simulator.finishes import FinishLedger
from rlsim.simulator.lifecycle import ToScoring
from rlsim.simulator.recorder import AgentTally, Recorder
from rlsim.simulator.reward import RewardPool
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
    env, res: Resolved, engine_cls, costs: Costs, rec: Recorder, ledger: FinishLedger, bus: WeightBus
) -> tuple[list, list]:
    """The inference engines (one TP group each) and the queues they take work from.

    Each engine attaches itself to its queue, the ledger and the bus when built (ports.py).
    """
    pipe = res.scenario.pipeline
    shared = pipe.dispatch is Dispatch.pull
    n, tp = res.scenario.engines, pipe.inference.tp
    queues = [WorkQueue(env)] if shared else [WorkQueue(env) for _ in range(n)]
    engines = []
    for e in range(n):
        name, queue = f"engine{e}", queues[0 if shared else e]
        rec.add_actor(name, "inference", list(range(e * tp, (e + 1) * tp)), IDLE_WEIGHTS)
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
        )
        engines.append(engine)
    return engines, queues


def _dispatcher(env, res: Resolved, queues: list[WorkQueue], bus: WeightBus, ledger: FinishLedger) -> Dispatcher:
    sc = res.scenario
    agent = sc.workload.agent
    sampler = GroupSampler(sc, np.random.default_rng(sc.seed))
    sched = _schedule(res)
    if sched is not None:
        mean_length(sc.workload.response_tokens, sampler.base_dir)  # fail early on a bad file
    return Dispatcher(
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
        kv_kept=agent is not None and agent.kv_cache is KvDuringToolWait.kept,
    )


def _route(env, res: Resolved, reward: RewardPool, rec: Recorder):
    """Where finished sequences go (lifecycle.py): scoring, or tool calls between agent turns."""
    agent = res.scenario.workload.agent
    if agent is None:
        return ToScoring(reward.submit)
    rec.agent = AgentTally()
    kept = agent.kv_cache is KvDuringToolWait.kept
    return ToolCalls(env, reward.submit, rec, kept=kept, environments=agent.environments)


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
    infer_gpus, train_gpus = sc.pool_gpus
    first = 0 if colocated else infer_gpus
    rec.add_actor("trainer", "training", list(range(first, first + train_gpus)), IDLE_DATA)  # first: wins when busy

    buffer = RolloutBuffer(env, rec, (pipe.depth + 1) * sc.algorithm.prompts_per_step)
    reward = RewardPool(
        env, buffer, seconds_per_sample=sc.workload.reward.seconds_per_sample, workers=sc.workload.reward.workers
    )
    route = _route(env, res, reward, rec)
    ledger = FinishLedger(env, route, reward.seconds)
    engines, queues = _engines(env, res, engine_cls, costs, rec, ledger, bus)
    if isinstance(route, ToolCalls) and pipe.dispatch is Dispatch.pull:
        route.shared_queue = queues[0]
    dispatcher = _dispatcher(env, res, queues, bus, ledger)
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
    )
    trainer = Trainer(env, "trainer", cfg, costs, buffer, bus, rec, dispatcher)
    return Wiring(env, rec, trainer, engines, dispatcher, buffer, costs, ledger)
