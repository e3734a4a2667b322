"""From a SimResult to the numbers people compare: step time, throughput, idle time, staleness.

Pure functions of the recorder; no simulation and no formatting happen here. Besides idle time,
the batch occupancy of decoding engines: an engine decoding 3 sequences out of a max_batch of 256
is "busy" but does a few percent of the work it could, and in synchronous RL that tail of a
step (the last, longest responses) is where most GPU time hides. Decode GPU-seconds at a batch
below TAIL_BATCH_FRACTION of max_batch are counted as "tail" (docs/metrics.md).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from rlsim.metrics.partial import PartialRolloutMetrics, partial_metrics
from rlsim.models import periodic
from rlsim.placement import Resolved
from rlsim.pools import mixed_gpu_types
from rlsim.scenario import all_or_none_share
from rlsim.simulator.costs import Costs
from rlsim.simulator.recorder import Recorder
from rlsim.simulator.run import SimResult
from rlsim.simulator.states import ALL_STATES, CORE_STATES, DECODE, IDLE_STATES

TAIL_BATCH_FRACTION = 0.25  # decode below a quarter of max_batch counts as the tail


class PoolMetrics(BaseModel):
    """GPU time of one pool (inference, training, or a reward model's), summed over its GPUs."""

    pool: str = Field(description="'inference', 'training' or 'reward'; colocated pools share GPUs.")
    gpus: int = Field(description="GPUs in the pool.")
    gpu_type: str | None = Field(
        default=None, description="The pool's catalog GPU type; only listed when the pools' types differ."
    )
    usd_per_gpu_hour: float | None = Field(
        default=None, description="The pool's default catalog price per GPU-hour; only listed when types differ."
    )
    shares_gpus_with: str | None = Field(
        default=None,
        description="The pool whose GPUs this one runs on (a reward model on the trainer's); listed when set.",
    )
    gpu_seconds_by_state: dict[str, float] = Field(description="GPU-seconds per state, summed over the pool's GPUs.")
    busy_fraction: float = Field(description="Share of the pool's GPU time in busy states.")
    idle_fraction: float = Field(description="Share of the pool's GPU time in idle states.")
    top_idle_cause: str | None = Field(description="The idle state holding the most GPU time, if any.")

    @model_serializer(mode="wrap")
    def _without_unset_types(self, handler):
        """A run on one GPU type lists what it always has: the type fields only appear when set."""
        data = handler(self)
        for key in ("gpu_type", "usd_per_gpu_hour", "shares_gpus_with"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class DynamicSamplingMetrics(BaseModel):
    """DAPO dynamic sampling: what the filter threw away and how many rounds a step took."""

    all_or_none_share: float = Field(description="Expected share of groups with all-equal rewards (the scenario's).")
    filtered_groups: int = Field(description="Groups filtered out because their G rewards were all equal.")
    surplus_groups: int = Field(description="Useful groups beyond the B a step trains on, dropped (verl truncates).")
    filtered_tokens: int = Field(description="Response tokens of filtered and surplus groups: generated, not trained.")
    filtered_token_fraction: float = Field(description="filtered_tokens / generated_tokens.")
    gen_rounds_per_step: float = Field(
        description="Mean generation rounds per step over the batches that reached B useful groups "
        "(verl train/num_gen_batches; continuous refill: ceil(prompts / prompts_per_gen_batch))."
    )
    gen_rounds_max: int = Field(description="Most generation rounds one step took.")
    prompts_generated_per_step: float = Field(
        description="Mean prompts generated per filled batch (B / (1 - share) on average when refilled one by one)."
    )


class AgentMetrics(BaseModel):
    """Multi-turn agent episodes (workload.agent): turns, tool calls and where an episode's time goes."""

    episodes: int = Field(description="Multi-turn episodes finished (their last turn generated).")
    turns_per_episode: float = Field(description="Mean turns per finished episode (tool calls + 1).")
    tool_calls: int = Field(description="Tool or environment calls started.")
    tool_call_s: float = Field(description="Mean seconds of one call (its drawn latency), s.")
    environment_wait_s: float = Field(
        description="Mean seconds a call waited for a free environment (workload.agent.environments), s."
    )
    episode_s: float = Field(description="Mean seconds from an episode's release to its last token, s.")
    episode_tool_fraction: float = Field(
        description="Share of those seconds spent in tool calls or waiting for an environment (no GPU works for it)."
    )


class PeriodicMetrics(BaseModel):
    """Periodic evaluation and checkpoints (scenario.evaluation, scenario.checkpointing): outside the step."""

    eval_pass_s: float = Field(description="Seconds of one evaluation pass (0 without evaluation).")
    eval_every_steps: int | None = Field(description="RL steps between evaluations (None: none).")
    checkpoint_s: float = Field(description="Seconds of one checkpoint (0 without checkpoints).")
    checkpoint_every_steps: int | None = Field(description="RL steps between checkpoints (None: none).")
    run_steps: int | None = Field(description="The run the mean below is over (scenario.run_steps); None: a long run.")
    amortized_s_per_step: float = Field(
        description="Evaluation and checkpoint seconds per step over the run: floor(R / N) x seconds / R each "
        "(without run_steps, seconds / N). Not in step_time_s; cost projections add it."
    )

    def run_s(self, run_steps: int) -> float:
        """Seconds a run of `run_steps` steps spends evaluating and checkpointing."""
        total = 0.0
        for every, seconds in (
            (self.eval_every_steps, self.eval_pass_s),
            (self.checkpoint_every_steps, self.checkpoint_s),
        ):
            if every is not None:
                total += periodic.run_s(run_steps, every, seconds)
        return total


class RunMetrics(BaseModel):
    """Everything reported for one simulated scenario (one mode)."""

    scenario: str
    mode: str
    engine: str = Field(description="Simulator engine: event-skipping or reference.")
    steps: int
    gpus: int = Field(description="GPUs rented (the whole cluster).")
    wall_time_s: float = Field(description="Simulated time from start to the last step's end, s.")
    step_time_s: float = Field(description="wall_time_s / steps, s.")
    steady_step_time_s: float = Field(description="Mean time between step ends over the second half of the run, s.")
    rollouts_per_s: float = Field(description="Trained samples / wall time.")
    output_tokens_per_s: float = Field(description="Generated response tokens / wall time (all GPUs).")
    trained_tokens_per_s: float = Field(description="Trained response tokens / wall time.")
    pools: list[PoolMetrics]
    gpu_seconds_by_state: dict[str, float] = Field(description="GPU-seconds per state over every GPU used.")
    idle_fraction: float = Field(description="Idle GPU-seconds / all GPU-seconds (rented GPUs, pools joined).")
    decode_occupancy: float = Field(
        default=0.0,
        description="Mean running batch / max_batch over the engines' decode GPU-seconds (1 = every slot full).",
    )
    tail_gpu_seconds: float = Field(
        default=0.0,
        description="Decode GPU-seconds with the running batch below 25% of max_batch (busy, but mostly unused).",
    )
    tail_fraction: float = Field(
        default=0.0, description="tail_gpu_seconds / all GPU-seconds (the same denominator as idle_fraction)."
    )
    staleness_mean: float = Field(description="Mean over trained samples of (trainer step - policy version at start).")
    staleness_max: int = Field(description="Largest staleness of a trained sample.")
    generated_tokens: int
    trained_tokens: int = Field(description="Response tokens of trained samples.")
    dropped_tokens: int = Field(description="Tokens rejected as stale or discarded by aborts.")
    in_flight_tokens: int = Field(
        description="Tokens generated but neither trained, dropped nor filtered (dynamic sampling) at the end."
    )
    dropped_token_fraction: float = Field(description="dropped_tokens / generated_tokens.")
    preemptions: int = Field(description="KV-cache preemptions (recompute).")
    buffer_max_groups: int = Field(
        description="Most complete groups waiting in the rollout buffer, the batch being assembled included."
    )
    buffer_capacity_groups: int
    weight_sync_s: float = Field(description="Seconds of one weight update (trainer side).")
    kv_capacity_tokens: int = Field(description="KV-cache capacity of one engine, tokens.")
    dynamic_sampling: DynamicSamplingMetrics | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # absent, not null, for scenarios without it
        description="Dynamic sampling (algorithm.filter_groups), when on.",
    )
    partial_rollout: PartialRolloutMetrics | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # absent from the JSON of runs without partial rollouts
        description="Carried work and token lag under pipeline.partial_rollout (absent otherwise).",
    )

    agent: AgentMetrics | None = Field(
        default=None, description="Multi-turn agent episodes; absent (not written) in single-turn scenarios."
    )
    periodic: PeriodicMetrics | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # absent from the JSON of runs without evaluation or checkpoints
        description="Periodic evaluation and checkpoints, outside the simulated step (absent when off).",
    )

    @model_serializer(mode="wrap")
    def _without_absent_agent(self, handler: SerializerFunctionWrapHandler) -> dict:
        data = handler(self)
        if self.agent is None:
            data.pop("agent", None)  # single-turn outputs stay as they were
        return data

    def pool(self, name: str) -> PoolMetrics:
        """The pool called `name` ('inference', 'training', 'reward')."""
        return next(p for p in self.pools if p.pool == name)


def recorded_states(result: SimResult) -> tuple[str, ...]:
    """The states a run's outputs list: the core ones, plus `score` when a reward model has GPUs."""
    return ALL_STATES if result.resolved.scoring is not None else CORE_STATES


def _pool_metrics(result: SimResult) -> tuple[list[PoolMetrics], dict[str, float]]:
    rec = result.recorder
    names = recorded_states(result)
    by_pool: dict[str, dict[str, float]] = {}
    gpus_in_pool: dict[str, set[int]] = {}
    total = {s: 0.0 for s in names}
    pieces: dict[tuple[str, ...], list[tuple[str, float]]] = {}  # per distinct track set, merged once
    for gpu in sorted(rec.gpu_actors):
        actors = tuple(rec.gpu_actors[gpu])
        pools = sorted({rec.pools[a] for a in actors})
        timeline = pieces.get(actors)
        if timeline is None:
            timeline = pieces[actors] = list(rec.gpu_track(gpu).durations())
        for state, seconds in timeline:
            total[state] += seconds
        for pool in pools:  # a colocated GPU belongs to both pools
            gpus_in_pool.setdefault(pool, set()).add(gpu)
            acc = by_pool.setdefault(pool, {s: 0.0 for s in names})
            for state, seconds in timeline:
                acc[state] += seconds
    out = []
    typed = mixed_gpu_types(result.resolved.pools)
    for p in result.resolved.pools:
        pool = p.name
        acc = by_pool[pool]
        span = sum(acc.values()) or 1.0
        idle = {s: acc[s] for s in IDLE_STATES}
        top = max(idle, key=lambda s: (idle[s], s)) if sum(idle.values()) > 0 else None
        out.append(
            PoolMetrics(
                pool=pool,
                gpus=len(gpus_in_pool[pool]),
                gpu_type=p.gpu if typed else None,
                usd_per_gpu_hour=p.usd_per_gpu_hour if typed else None,
                shares_gpus_with=p.shares if p.name == "reward" else None,
                gpu_seconds_by_state=acc,
                busy_fraction=1.0 - sum(idle.values()) / span,
                idle_fraction=sum(idle.values()) / span,
                top_idle_cause=top,
            )
        )
    return out, total


def _step_integrals(
    times: list[float], sizes: list[int], starts: np.ndarray, ends: np.ndarray, limit: float
) -> tuple[float, float]:
    """(∫ n dt, ∫ [n < limit] dt) over each [start, end] of the step function n(t): sizes[i]
    from times[i] on.

    n is 0 before the first sample; F(t), the integral from the first sample to t, is the
    cumulative sum up to t's segment plus the part of that segment before t.
    """
    t = np.concatenate(([-1.0], np.asarray(times, dtype=float)))
    n = np.concatenate(([0.0], np.asarray(sizes, dtype=float)))
    low = (n < limit).astype(float)
    widths = np.diff(t)
    cum_n = np.concatenate(([0.0], np.cumsum(n[:-1] * widths)))
    cum_low = np.concatenate(([0.0], np.cumsum(low[:-1] * widths)))

    def integral(cum: np.ndarray, values: np.ndarray, x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(t, x, side="right") - 1
        return cum[i] + values[i] * (x - t[i])

    filled = integral(cum_n, n, ends) - integral(cum_n, n, starts)
    tail = integral(cum_low, low, ends) - integral(cum_low, low, starts)
    return float(filled.sum()), float(tail.sum())


def decode_occupancy(rec: Recorder, max_batch: int) -> tuple[float, float, float]:
    """(decode GPU-seconds, batch-weighted decode GPU-seconds / max_batch, tail GPU-seconds).

    The running batch is a step function (`Recorder.running_samples`); it is integrated over each
    engine's decode intervals and weighted by the engine's GPUs (its TP size).
    """
    gpus: dict[str, int] = {}
    for actors in rec.gpu_actors.values():
        for actor in actors:
            gpus[actor] = gpus.get(actor, 0) + 1
    decode = filled = tail = 0.0
    for actor, (times, sizes) in rec.running_samples.items():
        track = rec.tracks[actor]
        decoding = np.array([state == DECODE for state in track.states], dtype=bool)
        if not decoding.any() or not times:
            continue
        starts, ends = np.array(track.start_s, dtype=float)[decoding], np.array(track.end_s, dtype=float)[decoding]
        weight = gpus.get(actor, 0)
        batch_s, low_s = _step_integrals(times, sizes, starts, ends, TAIL_BATCH_FRACTION * max_batch)
        decode += float((ends - starts).sum()) * weight
        filled += batch_s * weight / max_batch
        tail += low_s * weight
    return decode, filled, tail


def summarize(result: SimResult) -> RunMetrics:
    """The run's metrics (see docs/metrics.md for each definition)."""
    rec, sc = result.recorder, result.scenario
    wall = rec.end_s
    steps = rec.steps
    ends = [s.end_s for s in steps]
    half = max(1, len(ends) // 2)
    gaps = [b - a for a, b in zip(ends[half - 1 :], ends[half:])]
    steady = sum(gaps) / len(gaps) if gaps else wall
    samples = sum(s.samples for s in steps)
    trained = sum(s.response_tokens for s in steps)
    lag_weighted = sum(s.lag_mean * s.samples for s in steps)
    pools, total = _pool_metrics(result)
    busy_total = sum(total.values()) or 1.0
    dropped = rec.dropped_tokens + rec.discarded_tokens
    decode_s, filled_s, tail_s = decode_occupancy(rec, sc.pipeline.inference.max_batch)
    return RunMetrics(
        scenario=sc.name,
        mode=sc.pipeline.mode.value,
        engine=result.engine_kind,
        steps=len(steps),
        gpus=sc.cluster.total_gpus,
        wall_time_s=wall,
        step_time_s=wall / len(steps),
        steady_step_time_s=steady,
        rollouts_per_s=samples / wall,
        output_tokens_per_s=rec.generated_tokens / wall,
        trained_tokens_per_s=trained / wall,
        pools=pools,
        gpu_seconds_by_state=total,
        idle_fraction=sum(total[s] for s in IDLE_STATES) / busy_total,
        decode_occupancy=filled_s / decode_s if decode_s else 0.0,
        tail_gpu_seconds=tail_s,
        tail_fraction=tail_s / busy_total,
        staleness_mean=lag_weighted / samples,
        staleness_max=max(s.lag_max for s in steps),
        generated_tokens=rec.generated_tokens,
        trained_tokens=trained,
        dropped_tokens=dropped,
        in_flight_tokens=result.in_flight_tokens,
        dropped_token_fraction=dropped / rec.generated_tokens if rec.generated_tokens else 0.0,
        preemptions=rec.preemptions,
        buffer_max_groups=rec.buffer_max,
        buffer_capacity_groups=(sc.pipeline.depth + 1) * sc.algorithm.prompts_per_step,
        weight_sync_s=result_sync_s(result),
        kv_capacity_tokens=result.resolved.kv_capacity_tokens,
        dynamic_sampling=dynamic_sampling_metrics(result),
        partial_rollout=_partial(result, samples),
        agent=_agent_metrics(rec),
        periodic=periodic_metrics(result),
    )


def periodic_metrics(result: SimResult) -> PeriodicMetrics | None:
    """One evaluation pass and one checkpoint, and their mean per step over the run (None when both are off)."""
    return periodic_of(result.resolved)


def periodic_of(res: Resolved) -> PeriodicMetrics | None:
    """`periodic_metrics` from the resolved scenario alone: the terms need no simulation."""
    sc = res.scenario
    ev, ck = sc.evaluation, sc.checkpointing
    if ev is None and ck is None:
        return None
    costs = Costs(res)
    out = PeriodicMetrics(
        eval_pass_s=costs.eval_pass_s(),
        eval_every_steps=ev.every_steps if ev else None,
        checkpoint_s=costs.checkpoint_s(),
        checkpoint_every_steps=ck.every_steps if ck else None,
        run_steps=sc.run_steps,
        amortized_s_per_step=0.0,
    )
    if sc.run_steps is not None:
        per_step = out.run_s(sc.run_steps) / sc.run_steps
    else:
        per_step = sum(
            s / n
            for n, s in ((out.eval_every_steps, out.eval_pass_s), (out.checkpoint_every_steps, out.checkpoint_s))
            if n
        )
    return out.model_copy(update={"amortized_s_per_step": per_step})


def dynamic_sampling_metrics(result: SimResult) -> DynamicSamplingMetrics | None:
    log, sc = result.recorder.filtering, result.scenario
    if log is None:
        return None
    rounds = [log.rounds[b] for b in log.filled]
    prompts = [log.prompts[b] for b in log.filled]
    generated = result.recorder.generated_tokens
    return DynamicSamplingMetrics(
        all_or_none_share=all_or_none_share(sc.algorithm.filter_groups, sc.algorithm.group_size),
        filtered_groups=log.filtered_groups,
        surplus_groups=log.surplus_groups,
        filtered_tokens=log.filtered_tokens,
        filtered_token_fraction=log.filtered_tokens / generated if generated else 0.0,
        gen_rounds_per_step=sum(rounds) / len(rounds) if rounds else 0.0,
        gen_rounds_max=max(rounds, default=0),
        prompts_generated_per_step=sum(prompts) / len(prompts) if prompts else 0.0,
    )


def _partial(result: SimResult, samples: int) -> PartialRolloutMetrics | None:
    partial = result.scenario.pipeline.partial_rollout
    if partial is None:
        return None
    return partial_metrics(
        result.recorder, partial.prompts_in_flight(result.scenario.algorithm.prompts_per_step), samples
    )


def _agent_metrics(rec: Recorder) -> AgentMetrics | None:
    tally = rec.agent
    if tally is None:
        return None
    episodes, calls = tally.episodes, tally.calls
    return AgentMetrics(
        episodes=episodes,
        turns_per_episode=tally.turns / episodes if episodes else 0.0,
        tool_calls=calls,
        tool_call_s=tally.call_s / calls if calls else 0.0,
        environment_wait_s=tally.queued_s / calls if calls else 0.0,
        episode_s=tally.episode_s / episodes if episodes else 0.0,
        episode_tool_fraction=tally.episode_tool_s / tally.episode_s if tally.episode_s else 0.0,
    )


def result_sync_s(result: SimResult) -> float:
    syncs = result.recorder.syncs
    return (syncs[0][1] - syncs[0][0]) if syncs else 0.0
