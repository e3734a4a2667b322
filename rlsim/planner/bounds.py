"""A closed-form lower bound on a candidate's projected run, from the performance models alone.

The planner (`search.py`) simulates candidates in order of this bound and skips one whose bound
is already dominated by a simulated candidate, so the bound must never exceed what simulating
would report. It is built only from facts the simulator guarantees:

- The trainer runs its steps one after another, so consecutive step ends are at least the
  step's trainer work apart: host overhead, the colocated switch, the log-prob, train and
  optimizer phases (`Costs.train_phases` of the step's samples) and, on a sync step, the weight
  sync (and the colocated switch back).
- When the trainer takes batch s whole (not streaming, no `reject` redraws, no partial
  rollouts), its samples are the s-th draw of the seeded sampler, which the bound redraws here:
  those phases are exact. Else
  only the length-independent parts count (the optimizer, overhead, sync).
- Batch s is released only when the trainer's version reaches s - depth (the optimizer of step
  s - depth - 1 has ended; a disaggregated sync of that step then still runs), and its longest
  response needs one decode iteration per token after the first, each at least an iteration at
  batch 1 over that sequence's own cached tokens (iterations only get slower with more batch or
  cache). Prefill, rewards and queueing add time and are left out.
- When the dispatcher's split is fixed (round robin over per-engine queues, every batch released
  whole), each engine's share of each batch is known: the engines finish their own shares in
  release order (a floor that adds up over batches), and each share alone takes at least its
  longest response's iterations, each over the share's cache (an engine is one iteration after
  another). Pooling the engines as one machine hides their imbalance; this does not.

From these, a lower bound on each step's end (from time 0, and from the start of the steady
window: the second half of the simulated steps, as `rlsim.metrics.summary` measures it) bounds
the simulated wall time and the steady step time, and the projection's arithmetic
(`rlsim.metrics.cost.project_points`) turns them into run seconds; dollars are GPUs x hours x the
candidate's $/GPU-hour. A trained sample started on weights the engines were sent, at most
the trainer's version: its staleness is at least the step's remainder by the sync interval; with
a run-ahead of at most one step and blocking weight loads it is exactly the most the dispatcher
allows (`least_lags`); and a sample an engine admits at time 0, before its first decode, started
on version 0 (`_started_on_first_weights`). Under `training.stream_minibatches` a step trains the
first complete groups of any batch, each minibatch as it comes, so only the trainer's
length-free terms count. Units: seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from rlsim.models import train_step
from rlsim.placement import Resolved, resolve
from rlsim.scenario import Dispatch, Interrupt, Mode, Padding, Scenario, StalenessPolicy
from rlsim.simulator.costs import Costs
from rlsim.workload import GroupSampler, mean_length

MARGIN = 1e-9  # relative: the bound stays below the simulator's own float rounding


@dataclass(frozen=True)
class RunBound:
    """Lower bounds on a candidate's projected run (seconds) and mean staleness."""

    wall_s: float
    staleness_mean: float = 0.0
    sim_s: tuple[float, float] | None = None  # one sample point: (simulated wall time, steady step time)
    tail_s: float = 0.0  # one sample point: the last step's end - when any released sequence completed, at least


class BatchDraws:
    """The samples (prompt, response tokens) of each batch, drawn as the dispatcher draws them.

    Draws depend only on the workload, the batch shape, the seed and the response mean of the
    sample point, which every candidate of a plan shares, so they are drawn once and cached.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple, list[tuple[np.ndarray, np.ndarray]]] = {}

    def batches(self, sc: Scenario, mean_tokens: float | None, steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
        wl = sc.workload
        key = (wl.model_dump_json(), str(sc.base_dir), sc.algorithm.prompts_per_step, sc.algorithm.group_size,
               sc.seed, mean_tokens)  # fmt: skip
        drawn = self._cache.setdefault(key, [])
        if len(drawn) < steps:
            sampler = GroupSampler(sc, np.random.default_rng(sc.seed))
            out = []
            for _ in range(steps):
                if mean_tokens is not None:
                    sampler.set_response_mean(mean_tokens)
                draws = sampler.draw_many(sc.algorithm.prompts_per_step)
                prompts = np.array([d.prompt_tokens for d in draws for _ in d.response_tokens], dtype=np.int64)
                responses = np.array([r for d in draws for r in d.response_tokens], dtype=np.int64)
                out.append((prompts, responses))
            drawn[:] = out
        return drawn[:steps]


def point_means(sc: Scenario, fractions: Sequence[float]) -> list[float | None]:
    """The constant response mean simulated at each run fraction (None: no length schedule)."""
    sched = sc.workload.length_schedule
    if sched is None:
        return [None for _ in fractions]
    mean_length(sc.workload.response_tokens, sc.base_dir)
    return [sched.start_mean + (sched.end_mean - sched.start_mean) * f for f in fractions]


def step_ends(sc: Scenario, costs: Costs, batches: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float, float]:
    """(lower bound on the last step's end, on the steady step time, on the last step's end after
    any released sequence completes) for one simulated run.

    The last: the step that trains a sequence's group takes at least its trainer work after the
    group completes (unless minibatches are streamed: then 0), and, when the trainer takes B
    complete groups of any batch, their compute floors too (`_streaming_ends`)."""
    pipe = sc.pipeline
    n, depth, every = sc.steps, pipe.depth, pipe.weight_sync.every_steps
    colocated = pipe.mode is Mode.colocated
    # released batches are the draws (not under partial rollouts: a step trains the first B of more,
    # some begun a step earlier)
    drawn = pipe.staleness.policy is not StalenessPolicy.reject and pipe.partial_rollout is None
    streamed = pipe.training.stream_minibatches  # a step trains the first complete groups of any batch,
    drawn = drawn and not streamed  # each minibatch once it is complete: neither its samples nor its wait known
    whole = drawn and pipe.dispatch is not Dispatch.pull  # ... and each is trained as one step
    first = costs.iteration(1)
    decode = DecodeFloor(costs, pipe.inference.max_batch, sc.engines)
    split = _fixed_split(sc) if drawn else None
    train, work, longest, released = [], [], [], []
    own, alone = [], []  # with a fixed split: each engine's work of each batch, and that batch alone
    for s in range(n):
        synced = (s + 1) % every == 0 or s + 1 == n
        prompts, responses = batches[s]
        if whole:
            lengths = (prompts + responses).tolist()
            if pipe.training.padding is Padding.batch_longest:
                lengths = [max(lengths)] * len(lengths)
            p = costs.train_phases(lengths)
            phases = p.logprob_s + p.train_s + p.optimizer_s
        elif streamed:  # one optimizer step per minibatch, at least one
            phases = costs.minibatch_phases([1], True).optimizer_s
        else:
            phases = costs.train_phases([1]).optimizer_s  # length-independent
        if drawn:
            i = int(np.argmax(responses))
            longest.append(first.span_s(float(prompts[i]), int(responses[i]) - 1))
            work.append(decode.seconds(prompts, responses))
            if split is not None:
                w, a = decode.per_engine(prompts, responses, split(s, len(responses)))
                own.append(w)
                alone.append(a)
        else:
            longest.append(0.0)
            work.append(0.0)
        sync = (costs.sync_s + costs.switch_s) if synced else 0.0
        train.append(pipe.training.step_overhead_s + costs.switch_s + phases + sync)
        released.append(0.0 if colocated or not synced else costs.sync_s)  # step end - next release
    half = max(1, n // 2)
    if pipe.dispatch is Dispatch.pull and drawn:
        return _streaming_ends(sc, costs, batches, train, work, longest)
    tail = 0.0 if streamed else min(train)

    def last_end(origin: int) -> float:
        """A lower bound on end_{n-1} - end_origin (origin -1: time 0), step by step.

        Batches released before the origin count as generated by then (the most favourable
        case); the later ones are decoded by the engines pooled as one machine, in release order,
        and, when the split is fixed, by each engine its own share, in release order, each
        batch's share taking at least its lone floor from the batch's release.
        """
        end = {origin: 0.0}
        engines = -math.inf  # when the pooled engines finish the work released so far
        each = np.full(sc.engines, -math.inf)  # when each engine finishes its share of it (fixed split)
        for j in range(origin + 1, n):
            k = j - depth - 1  # the step whose optimizer releases batch j
            ready = -math.inf
            if k >= origin:
                release = end[k] - released[k] if k >= 0 else 0.0
                engines = max(engines, release) + work[j]
                ready = max(engines, release + longest[j])
                if own:
                    each = np.maximum(each, release) + own[j]
                    ready = max(ready, float(each.max()), release + float(alone[j].max()))
            end[j] = max(end[j - 1], ready) + train[j]
        return end[n - 1]

    wall = last_end(-1)
    steady = last_end(half - 1) / (n - half) if n > half else wall
    return wall, steady, tail


def run_bound(
    sc: Scenario,
    fractions: Sequence[float],
    run_steps: int,
    draws: BatchDraws,
    fill_steps: int,
    resolved: Resolved | None = None,
) -> RunBound:
    """A lower bound on `project_points` of the simulations at `fractions` (see module doc);
    `resolved` is `resolve(sc)` when the caller has it."""
    costs = Costs(resolved or resolve(sc))
    n = sc.steps
    batches = [draws.batches(sc, m, n) for m in point_means(sc, fractions)]
    lag = min(staleness_floor(sc, costs, b) for b in batches)  # at most any mix of the points
    if not (_lags_exact(sc) and len(batches) == 1):  # exact: the simulator's own rounding (`staleness_floor`)
        lag = _below(lag)
    ends = [step_ends(sc, costs, b) for b in batches]
    points = [(w, s) for w, s, _ in ends]
    wall0, _ = points[0]
    sim, tail = (points[0], _below(ends[0][2])) if len(points) == 1 else (None, 0.0)
    if len(points) == 1 and run_steps <= n:
        return RunBound(_below(wall0 * run_steps / n), lag, sim, tail)
    if n < 2 * fill_steps:  # charged the average step: wall / steps at every point
        steps_s = [w / n for w, _ in points]
        return RunBound(_below(wall0 - n * steps_s[0] + run_steps * _trapezoid(fractions, steps_s)), lag, sim, tail)
    # wall = wall0 + sum_i w_i s_i - n s0 with trapezoid weights w_i (sum R): each s_i >= its bound
    weights = _trapezoid_weights(fractions, run_steps)
    weights[0] -= n
    if weights[0] < 0:
        return RunBound(_below(wall0), lag, sim, tail)  # s0 would need an upper bound; the simulation is a floor
    return RunBound(_below(wall0 + sum(w * s for w, (_, s) in zip(weights, points, strict=True))), lag, sim, tail)


def least_lags(sc: Scenario) -> list[int]:
    """The least staleness (trained step - policy version at its start) of a sample of each step.

    A sample trained at step s started on a version the engines were sent (a multiple of the sync
    interval) and no newer than s: its lag is at least s mod the interval. When batch s is trained
    whole and the engines run ahead by at most one step under `blocking` weight loads, every sample
    of it starts on exactly the oldest version it may (`Dispatcher.min_version`): an engine loads
    weights only with nothing running and the head of its queue (first in, first out, batch by
    batch) unable to start on its weights, so it reaches a newer version only once it has started
    every sample of the batches that could still use the older one; and the version after
    min_version(s) is published only when step s - 1 has ended (with depth <= 1), after an engine
    that was loading an older one has loaded it (the engine's load and the trainer's sync take the
    same seconds, and a training step comes between two publications).
    """
    pipe, n = sc.pipeline, sc.steps
    every, depth = pipe.weight_sync.every_steps, pipe.depth
    if not _lags_exact(sc):
        return [s % every for s in range(n)]
    out = []
    for s in range(n):
        v = max(0, s - depth)
        out.append(s - (v - v % every))
    return out


def staleness_floor(sc: Scenario, costs: Costs, batches: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """A lower bound on the mean staleness over the samples of the simulated steps.

    Each sample's lag is at least its step's `least_lags` (exact when those are); and, when they
    are not exact, a sample an engine admits before its first decode iteration is at least its
    own batch number (`_started_on_first_weights`).
    """
    lags = least_lags(sc)
    if _lags_exact(sc):  # the simulated mean to the last bit: every step trains as many samples, each of
        return sum(lags) / len(lags)  # the step's lag, so both round the same rational (summary.py)
    early = _started_on_first_weights(sc, costs, batches)
    total = sum(len(r) * lag for (_, r), lag in zip(batches, lags, strict=True))
    total += sum(k * (s - lags[s]) for s, k in enumerate(early))
    return total / sum(len(r) for _, r in batches)


def _started_on_first_weights(sc: Scenario, costs: Costs, batches: list[tuple[np.ndarray, np.ndarray]]) -> list[int]:
    """How many samples of each batch released at time 0 an engine admits before it decodes at all.

    Batches 0 .. depth are released at time 0 (`Dispatcher.run`; their `min_version` is 0), in
    draw order, to per-engine queues when the split is fixed. An engine then runs admission
    passes back to back (`Engine.run`: a prefill pass, then admission again) until one admits
    nothing, and only then decodes; with nothing running yet, `RunningBatch.admit` takes the
    head of its queue while a slot is free and the cache holds kv + context + running + 2 tokens
    (prefill budgets only split the passes). Those samples start on version 0: version 1 is
    published when step 0 ends, after every sample of batch 0 completed, which needs a decode
    iteration of this engine if it holds one of two tokens or more; and no interrupt but
    `abort_discard` gives a sample a newer start. A sample of batch s trained whole at step s,
    its lag is then s. Empty when any of this is not known in advance.
    """
    pipe = sc.pipeline
    split = _fixed_split(sc)
    if (
        split is None
        or pipe.mode is Mode.colocated
        or pipe.depth < 1
        or pipe.dispatch is Dispatch.pull
        or pipe.interrupt is Interrupt.abort_discard
        or pipe.staleness.policy is StalenessPolicy.reject
        or pipe.partial_rollout is not None
        or pipe.training.stream_minibatches
        or (pipe.reward_model is not None and pipe.reward_model.placement == "with_inference")
    ):
        return []
    released = batches[: min(pipe.depth, sc.steps - 1) + 1]
    engine = [split(s, len(r)) for s, (_, r) in enumerate(released)]
    prompts = np.concatenate([p for p, _ in released]).astype(np.int64)
    batch = np.concatenate([np.full(len(r), s) for s, (_, r) in enumerate(released)])
    owner = np.concatenate(engine)
    first_long = np.concatenate([r >= 2 if s == 0 else np.zeros(len(r), bool) for s, (_, r) in enumerate(released)])
    counts = np.zeros(len(released), dtype=np.int64)
    capacity, max_batch = costs.res.kv_capacity_tokens, pipe.inference.max_batch
    for e in range(sc.engines):
        mine = np.flatnonzero(owner == e)  # its queue, in draw order, batch after batch
        if not first_long[mine].any():
            continue  # batch 0 might complete before this engine decodes: no proof
        c = prompts[mine]
        held = np.concatenate(([0], np.cumsum(c + 1)[:-1]))  # cache held before each admission
        fits = held + c + np.arange(len(c)) + 2 <= capacity
        admitted = min(max_batch, int(np.argmin(fits)) if not fits.all() else len(c))
        counts += np.bincount(batch[mine[:admitted]], minlength=len(released))
    return counts.tolist()


def _lags_exact(sc: Scenario) -> bool:
    """`least_lags` are every sample's staleness (see there)."""
    pipe, reward = sc.pipeline, sc.pipeline.reward_model
    return (
        pipe.depth <= 1
        and not pipe.training.stream_minibatches  # a step trains groups of any batch
        and pipe.interrupt is Interrupt.blocking
        and pipe.dispatch is not Dispatch.pull
        and pipe.staleness.policy is not StalenessPolicy.reject
        and pipe.partial_rollout is None
        and pipe.staleness_threshold is None
        and sc.algorithm.filter_groups is None
        and sc.workload.agent is None
        and (reward is None or reward.placement != "with_inference")  # scoring holds an engine's loads back
    )


def _trapezoid_weights(fractions: Sequence[float], run_steps: int) -> list[float]:
    """w_i with run_steps x trapezoid mean of values = sum w_i values_i (one point: weight R)."""
    if len(fractions) == 1:
        return [float(run_steps)]
    span = fractions[-1] - fractions[0]
    w = [0.0] * len(fractions)
    for i in range(len(fractions) - 1):
        half = (fractions[i + 1] - fractions[i]) / 2.0 / span * run_steps
        w[i] += half
        w[i + 1] += half
    return w


def _trapezoid(fractions: Sequence[float], values: Sequence[float]) -> float:
    if len(values) == 1:
        return values[0]
    return sum(w * v for w, v in zip(_trapezoid_weights(fractions, 1), values, strict=True))


def _below(seconds: float) -> float:
    return max(0.0, seconds * (1.0 - MARGIN))


def _streaming_ends(
    sc: Scenario,
    costs: Costs,
    batches: list[tuple[np.ndarray, np.ndarray]],
    train: list[float],
    work: list[float],
    longest: list[float],
) -> tuple[float, float, float]:
    """`step_ends` when the trainer takes the first complete groups of any batch (streaming).

    Every released group is trained once, in completion order: the steps of a span hold that
    many groups, at least the cheapest ones; and all of them are decoded before the last step,
    batch j no earlier than its release (when the trainer reaches version j - depth), its
    longest response no earlier than `longest[j]` after that (one iteration at batch 1 per token).
    """
    n, depth, b = sc.steps, sc.pipeline.depth, sc.algorithm.prompts_per_step
    half = max(1, n // 2)
    floors = np.sort(np.concatenate([_group_floors(sc, costs, p, r) for p, r in batches]))
    cheapest = np.concatenate(([0.0], np.cumsum(floors)))  # cheapest[k]: the k cheapest groups
    trained = np.concatenate(([0.0], np.cumsum(train)))

    def gap(origin: int, k: int) -> float:
        """Least end_k - end_origin (origin -1: time 0): steps origin+1..k, each of B groups."""
        return float(trained[k + 1] - trained[origin + 1] + cheapest[(k - origin) * b])

    def decoded(origin: int) -> float:
        """Least time from the origin until the batches released after it are decoded."""
        engines = done = -math.inf
        for j in range(n):
            k = j - depth - 1  # the step whose optimizer releases batch j
            if k < origin:
                continue  # released before the origin: counted as decoded by then
            release = gap(origin, k) - costs.sync_s if k >= 0 else 0.0
            engines = max(engines, release) + work[j]
            done = max(done, release + longest[j])
        return max(engines, done, 0.0)  # 0: none released after the origin (it is a step end)

    last = train[-1] + float(cheapest[b])
    wall = max(gap(-1, n - 1), decoded(-1) + last)
    tail = min(train) + float(cheapest[b])  # the step that trains the last group: B complete groups
    if n <= half:
        return wall, wall, tail
    return wall, max(gap(half - 1, n - 1), decoded(half - 1) + last) / (n - half), tail


def _group_floors(sc: Scenario, costs: Costs, prompts: np.ndarray, responses: np.ndarray) -> np.ndarray:
    """Each group's training compute floor (`train_step.compute_floor_s`, additive over samples).

    On the training pool's GPU, and with the FLOPs counted at the MFU of a full micro-batch
    (`train_step.mfu` at the cap) instead of the saturation's limit: the MFU rises with a
    micro-batch's tokens, and none holds more than the cap, so no phase runs faster.
    """
    alg, g = sc.algorithm, sc.algorithm.group_size
    lengths = (prompts + responses).astype(float).reshape(-1, g)  # padding only adds to these
    passes = int(alg.recompute_old_logprobs) + int(alg.reference_model) + int(alg.has_critic)
    profile, shape = costs.train_profile, costs.train_shape
    unit = partial(
        train_step.compute_floor_s,
        costs.llm,
        profile,
        shape,
        forward_passes=passes,
        critic=alg.has_critic,
        logprob_speed=sc.efficiency.logprob_speed,
    )
    saturation = 1.0
    if train_step._ops(costs.llm, profile, shape) is None:  # FLOPs at a rate (not timed operators)
        saturation = (shape.mfu_override or profile.train_mfu) / train_step.mfu(profile, shape)
    per_token, per_sq = unit(1.0, 0.0) * saturation, unit(0.0, 1.0) * saturation  # the floor is linear in both
    return lengths.sum(axis=1) * per_token + (lengths**2).sum(axis=1) * per_sq


def _fixed_split(sc: Scenario):
    """(batch, sequences) -> each sequence's engine, when the dispatcher's split is known in advance.

    Round robin over per-engine queues deals whole groups (or single sequences) to the engines in
    draw order, batch after batch, when every batch is released whole and nothing is redrawn
    (no dynamic sampling, release quota or agent episodes); None otherwise.
    """
    pipe, alg = sc.pipeline, sc.algorithm
    if (
        pipe.dispatch is not Dispatch.round_robin
        or alg.filter_groups is not None
        or pipe.staleness_threshold is not None
        or sc.workload.agent is not None
    ):
        return None
    n, g, b = sc.engines, alg.group_size, alg.prompts_per_step
    together = pipe.inference.keep_groups_together

    def split(batch: int, sequences: int) -> np.ndarray:
        if together:
            return np.repeat((batch * b + np.arange(sequences // g)) % n, g)
        return (batch * sequences + np.arange(sequences)) % n

    return split


class DecodeFloor:
    """Seconds the pooled engines need at least to decode a batch's responses.

    An iteration at batch b over K cached tokens costs fixed(b) + max(mem0(b) + mem_k K,
    comp0(b) + comp_k K) (`IterationCost.at`, the eager floor left out). fixed and mem0 are
    smallest at batch 1, comp0(b) / b and (fixed(b) + mem0(b)) / b at the largest batch, and the
    slopes do not depend on the batch (tests check these). The j-th decoded token of a sequence
    holds at least its prompt + j cached tokens, and an iteration holds at most max_batch
    sequences and the engine's KV capacity in tokens, which sets a least number of iterations;
    the engines split the sum at best evenly.
    """

    def __init__(self, costs: Costs, max_batch: int, engines: int) -> None:
        full, one = costs.iteration(max_batch), costs.iteration(1)
        self.fixed, self.mem0 = min(one.fixed_s, full.fixed_s), min(one.mem0_s, full.mem0_s)
        self.mem_share = min(one.fixed_s + one.mem0_s, (full.fixed_s + full.mem0_s) / max_batch)
        self.comp_share = min(one.comp0_s, full.comp0_s / max_batch)
        self.mem_k = min(full.mem_per_token_s, one.mem_per_token_s)
        self.comp_k = min(full.comp_per_token_s, one.comp_per_token_s)
        self.max_batch, self.engines = max_batch, engines
        self.capacity = max(1, costs.res.kv_capacity_tokens)

    def seconds(self, prompts: np.ndarray, responses: np.ndarray) -> float:
        steps = np.maximum(responses - 1, 0).astype(float)  # the first token comes with the prefill
        tokens = float(steps.sum())
        cached = float((steps * prompts + steps * (steps - 1) / 2.0).sum())
        iterations = max(tokens / self.max_batch, cached / self.capacity)  # over all engines
        return self.floor(iterations, tokens, cached) / self.engines

    def per_engine(
        self, prompts: np.ndarray, responses: np.ndarray, engine: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(each engine's floor for its own sequences, the same with its longest response's
        iterations counted): the first adds up over batches; the second holds for one batch
        alone, since an engine decodes one iteration after another and its longest response
        needs one iteration per token after the first, each over at least this batch's cache."""
        steps = np.maximum(responses - 1, 0).astype(float)
        n = self.engines
        tokens = np.bincount(engine, steps, n)
        cached = np.bincount(engine, steps * prompts + steps * (steps - 1) / 2.0, n)
        longest = np.zeros(n)
        np.maximum.at(longest, engine, steps)
        iterations = np.maximum(tokens / self.max_batch, cached / self.capacity)
        return self.floor(iterations, tokens, cached), self.floor(np.maximum(iterations, longest), tokens, cached)

    def floor(self, iterations, tokens, cached):
        """Seconds of `iterations` decode iterations producing `tokens` over `cached` tokens."""
        mem = np.maximum(iterations * (self.fixed + self.mem0), tokens * self.mem_share) + self.mem_k * cached
        comp = iterations * self.fixed + tokens * self.comp_share + self.comp_k * cached
        return np.maximum(mem, comp)
