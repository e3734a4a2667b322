"""Randomized small scenarios covering every mode, interrupt, staleness policy and dispatch."""

from __future__ import annotations

import numpy as np
from small_scenarios import make

from rlsim.scenario import Scenario

MODES = ["colocated", "sync", "one_step_off", "async", "streaming"]
INTERRUPTS = [None, "blocking", "soft_pause", "abort_resubmit", "abort_discard", "in_flight"]


def _policies(rng: np.random.Generator) -> dict:
    """Buffer depth, staleness policy and interrupt (drawn last, in this order, by both kinds)."""
    return {
        "buffer_depth": int(rng.integers(1, 4)),
        "staleness": {
            "policy": str(rng.choice(["bound", "reject", "importance_sampling"])),
            "max_lag": int(rng.integers(0, 3)),
        },
        "weight_sync": {"interrupt": INTERRUPTS[int(rng.integers(0, len(INTERRUPTS)))], "every_steps": 1},
    }


def _length_and_seed(rng: np.random.Generator) -> dict:
    return {"steps": int(rng.integers(2, 5)), "seed": int(rng.integers(0, 1000))}


def outcome(result) -> dict:
    """What two engines must agree on exactly: every token count, per-step tokens and lags."""
    rec = result.recorder
    return {
        "generated": rec.generated_tokens,
        "dropped": rec.dropped_tokens,
        "discarded": rec.discarded_tokens,
        "in_flight": result.in_flight_tokens,
        "filtered": rec.filtering.filtered_tokens if rec.filtering else 0,
        "trained": [s.response_tokens for s in rec.steps],
        "lags": [(s.lag_mean, s.lag_max) for s in rec.steps],
        "preemptions": rec.preemptions,
    }


def record(result) -> dict:
    """`outcome` and what the recorder logged (intervals, batch samples, steps, the end): what a
    planned engine's commits must log as the span-by-span engine does."""
    rec = result.recorder
    return {
        **outcome(result),
        "intervals": dict(rec.actor_intervals),
        "batches": dict(rec.batch_samples),
        "steps": rec.steps,
        "end_s": rec.end_s,
    }


def random_scenario(i: int, interrupt: str | None = None) -> Scenario:
    """Scenario number i: small enough for the iteration-level reference to run in ~0.1 s."""
    rng = np.random.default_rng(1000 + i)
    mode = MODES[i % len(MODES)]
    gpus = int(rng.choice([2, 4]))
    over = {
        "model": str(rng.choice(["qwen2.5-0.5b", "qwen2.5-1.5b"])),
        "cluster": {"gpu": str(rng.choice(["h100-sxm", "a100-80gb", "h200"])), "gpus_per_node": gpus},
        "algorithm": {
            "prompts_per_step": int(rng.integers(2, 6)),
            "group_size": int(rng.choice([2, 4])),
            "minibatches": 1,
        },
        "workload": {
            "prompt_tokens": {"kind": "lognormal", "mean": float(rng.uniform(20, 200)), "sigma": 0.5, "max": 512},
            "response_tokens": {"kind": "lognormal", "mean": float(rng.uniform(50, 400)), "sigma": 0.9, "max": 1500},
            "group_correlation": float(rng.uniform(0, 1)),
            "reward": {"kind": "cpu_verifier", "seconds_per_sample": float(rng.choice([0.0, 0.01])), "workers": 4},
        },
        "pipeline": {
            "mode": mode,
            "inference": {
                "gpus": gpus // 2,
                "tp": 1,
                "max_batch": int(rng.choice([4, 8, 64])),
                "kv_memory_fraction": float(rng.choice([0.9, 0.9, 0.9])),
            },
            "training": {"gpus": gpus // 2, "micro_batch_tokens": 2048},
            **_policies(rng),
        },
        **_length_and_seed(rng),
    }
    if interrupt is not None:  # this interrupt instead of the drawn one
        over["pipeline"]["weight_sync"]["interrupt"] = interrupt
    if i % 7 == 3:  # sync every other step, which needs max_lag >= 1 under rejection
        over["pipeline"]["weight_sync"]["every_steps"] = 2
        over["pipeline"]["staleness"]["max_lag"] = max(1, over["pipeline"]["staleness"]["max_lag"])
    if mode == "colocated":
        over["pipeline"]["inference"].pop("gpus")
        over["pipeline"]["training"].pop("gpus")
    return make(over)


def pressured_scenario(i: int, interrupt: str | None = None) -> Scenario:
    """Scenario number i under pressure: a 7B model on two engines with a small KV cache
    (preemption), every dispatch policy, groups spread or kept, busy verifiers."""
    rng = np.random.default_rng(5000 + i)
    mode = MODES[i % len(MODES)]
    over = {
        "model": "qwen2.5-7b",
        "cluster": {"gpu": "h100-sxm", "gpus_per_node": 4},
        "algorithm": {
            "prompts_per_step": int(rng.integers(6, 13)),
            "group_size": int(rng.choice([4, 8])),
            "minibatches": 1,
        },
        "workload": {
            "prompt_tokens": {"kind": "lognormal", "mean": float(rng.uniform(100, 2000)), "sigma": 0.5, "max": 4096},
            "response_tokens": {"kind": "lognormal", "mean": float(rng.uniform(1000, 4000)), "sigma": 0.9, "max": 8000},
            "group_correlation": float(rng.uniform(0, 1)),
            "reward": {
                "kind": "cpu_verifier",
                "seconds_per_sample": float(rng.choice([0.0, 0.02, 0.2])),
                "workers": int(rng.choice([1, 2, 8])),
            },
        },
        "pipeline": {
            "mode": mode,
            "inference": {
                "gpus": 2,
                "tp": 1,
                "max_batch": int(rng.choice([16, 64, 256])),
                "kv_memory_fraction": float(rng.choice([0.23, 0.24, 0.26])),
                "dispatch": str(rng.choice(["pull", "round_robin", "least_loaded"])),
                "keep_groups_together": bool(rng.integers(0, 2)),
            },
            "training": {"gpus": 2, "micro_batch_tokens": 16384},
            **_policies(rng),
        },
        **_length_and_seed(rng),
    }
    if interrupt is not None:  # this interrupt instead of the drawn one
        over["pipeline"]["weight_sync"]["interrupt"] = interrupt
    if mode == "colocated":
        over["pipeline"]["inference"].pop("gpus")
        over["pipeline"]["training"].pop("gpus")
    return make(over)


def queued_scenario(i: int, interrupt: str | None = None) -> Scenario:
    """Scenario number i with more work queued than its engines can admit: small batches (a
    full batch admits one sequence per finish) or a small KV cache (admission waits for room,
    the newest is preempted), queues of one engine each (round-robin, least-loaded, or a pull
    queue with a single engine), one-token responses, aborted work, every mode and interrupt."""
    rng = np.random.default_rng(9000 + i)
    mode = MODES[i % len(MODES)]
    kv_bound = i % 3 == 1
    engines = 1 if mode == "streaming" or i % 4 == 0 else 2
    trainers = 2 if kv_bound else engines  # a 7B trainer needs two GPUs
    if mode == "colocated":
        engines = trainers = max(engines, trainers)
    dispatch = "pull" if engines == 1 and mode != "colocated" else str(rng.choice(["round_robin", "least_loaded"]))
    over = {
        "model": "qwen2.5-7b" if kv_bound else str(rng.choice(["qwen2.5-0.5b", "qwen2.5-1.5b"])),
        "cluster": {"gpu": "h100-sxm", "gpus_per_node": engines + trainers},
        "algorithm": {
            "prompts_per_step": int(rng.integers(6, 14)),
            "group_size": int(rng.choice([4, 8])),
            "minibatches": 1,
        },
        "workload": {
            "prompt_tokens": {"kind": "lognormal", "mean": float(rng.uniform(50, 1500)), "sigma": 0.5, "max": 4096},
            "response_tokens": {
                "kind": "lognormal",
                "mean": float(rng.uniform(1000, 3000) if kv_bound else rng.uniform(5, 300)),
                "sigma": 1.2,
                "max": 6000,
            },
            "group_correlation": float(rng.uniform(0, 1)),
            "reward": {
                "kind": "cpu_verifier",
                "seconds_per_sample": float(rng.choice([0.0, 0.01, 0.1])),
                "workers": int(rng.choice([1, 4])),
            },
        },
        "pipeline": {
            "mode": mode,
            "inference": {
                "gpus": engines,
                "tp": 1,
                "max_batch": int(rng.choice([64, 256])) if kv_bound else int(rng.choice([2, 4, 8])),
                "kv_memory_fraction": float(rng.choice([0.23, 0.24])) if kv_bound else 0.9,
                "dispatch": dispatch,
                "keep_groups_together": bool(rng.integers(0, 2)),
            },
            "training": {"gpus": trainers, "micro_batch_tokens": 16384},
            **_policies(rng),
        },
        **_length_and_seed(rng),
    }
    if mode == "colocated":
        over["pipeline"]["inference"].pop("gpus")
        over["pipeline"]["training"].pop("gpus")
        over["cluster"]["gpus_per_node"] = engines
    if interrupt is not None:
        over["pipeline"]["weight_sync"]["interrupt"] = interrupt
    return make(over)


def pooled_scenario(i: int) -> Scenario:
    """Scenario number i with a third pool or pools of different GPU types: a GPU reward model
    (its own pool, on the trainer's GPUs, or on the inference engines'; a reward model, a judge
    that decodes a verdict, a teacher) and an inference pool on another GPU type than the
    training pool."""
    rng = np.random.default_rng(9000 + i)
    mode = MODES[i % len(MODES)]
    placement = "with_training" if (i % 3 == 1 and mode != "colocated") else "own_pool"
    if i % 3 == 2:
        placement = "with_inference"  # every mode, colocated too (verl's reward model in its global pool)
    kind = str(rng.choice(["reward_model", "generative_judge", "teacher", "process_reward"]))
    reward_model = {
        "kind": kind,
        "model": str(rng.choice(["qwen2.5-0.5b", "qwen2.5-1.5b"])),
        "placement": placement,
        "tp": 1,
        "max_batch_sequences": int(rng.choice([2, 4, 16])),
        "verdict_tokens": int(rng.integers(1, 32)) if kind == "generative_judge" else 0,
    }
    if placement == "own_pool":
        reward_model["gpus"] = int(rng.choice([1, 2]))
        if i % 4 == 0:
            reward_model["gpu"] = "a100-80gb"
    gpus = 6
    over = {
        "model": str(rng.choice(["qwen2.5-0.5b", "qwen2.5-1.5b"])),
        "cluster": {"gpu": "h100-sxm", "gpus_per_node": gpus},
        "algorithm": {
            "prompts_per_step": int(rng.integers(2, 6)),
            "group_size": int(rng.choice([2, 4])),
            "minibatches": 1,
        },
        "workload": {
            "prompt_tokens": {"kind": "lognormal", "mean": float(rng.uniform(20, 200)), "sigma": 0.5, "max": 512},
            "response_tokens": {"kind": "lognormal", "mean": float(rng.uniform(50, 400)), "sigma": 0.9, "max": 1500},
            "reward": {"kind": "cpu_verifier", "seconds_per_sample": 0.0},
        },
        "pipeline": {
            "mode": mode,
            "inference": {"gpus": 2, "tp": 1, "max_batch": int(rng.choice([4, 8, 64]))},
            "training": {"gpus": 2, "micro_batch_tokens": 2048},
            "reward_model": reward_model,
            **_policies(rng),
        },
        **_length_and_seed(rng),
    }
    if mode == "colocated":
        over["pipeline"]["inference"].pop("gpus")
        over["pipeline"]["training"].pop("gpus")
    elif i % 2 == 0:
        over["pipeline"]["inference"]["gpu"] = str(rng.choice(["h200", "a100-80gb"]))
    return make(over)


def filtering_scenario(i: int) -> Scenario:
    """random_scenario(i) with DAPO dynamic sampling: a fixed share or a Beta pass rate, a gen
    batch smaller than, equal to or larger than B, with or without a (generous) cap on rounds,
    either refill rule."""
    base = random_scenario(i)
    rng = np.random.default_rng(7000 + i)
    b = base.algorithm.prompts_per_step
    if rng.random() < 0.5:
        fg: dict = {"all_or_none_share": float(rng.choice([0.0, 0.3, 0.6]))}
    else:
        fg = {"pass_rate": {"kind": "beta", "alpha": float(rng.uniform(0.3, 2)), "beta": float(rng.uniform(0.3, 2))}}
    fg["prompts_per_gen_batch"] = max(1, int(b * float(rng.choice([0.5, 1.0, 2.0]))))
    fg["max_num_gen_batches"] = int(rng.choice([0, 0, 60]))
    fg["refill"] = [None, "rounds", "continuous"][int(rng.integers(0, 3))]
    data = base.model_dump(mode="json")
    data["algorithm"]["filter_groups"] = fg
    return Scenario.model_validate(data)


def quota_scenario(i: int) -> Scenario:
    """random_scenario(i) as verl's fully-async rollouter: async or streaming, a staleness
    threshold (whole or a fraction) instead of a buffer depth, a sync every 1-3 steps."""
    j = i
    while (base := random_scenario(j)).pipeline.mode.value == "colocated":  # its pools may not split
        j += 1
    rng = np.random.default_rng(9000 + i)
    data = base.model_dump(mode="json")
    pipe = data["pipeline"]
    pipe["mode"] = ["async", "streaming"][int(rng.integers(0, 2))]
    pipe["buffer_depth"] = None
    pipe["staleness_threshold"] = float(rng.choice([0.0, 0.25, 0.5, 1.0, 1.5]))
    pipe["weight_sync"]["every_steps"] = every = int(rng.integers(1, 4))
    stale = pipe["staleness"]
    stale["max_lag"] = max(stale["max_lag"], 2 * every + 2)  # a lag the lead can reach is not a rejection
    return Scenario.model_validate(data)


def partial_scenario(i: int, interrupt: str | None = None) -> Scenario:
    """Scenario number i with partial rollouts: a random, pressured or queue-bound scenario (in
    turn) whose steps over-provision prompts and carry the unfinished ones; a rejecting staleness
    policy (refused with partial rollouts) becomes `bound`."""
    from rlsim.scenario import Interrupt, PartialRollout, StalenessPolicy

    base = (random_scenario, pressured_scenario, queued_scenario)[i % 3](i)
    rng = np.random.default_rng(20000 + i)
    over_provision = float(rng.choice([1.0, 1.25, 1.5, 2.0]))
    extra = int(rng.integers(0, 3)) or (
        1 if over_provision * base.algorithm.prompts_per_step < 2 + base.algorithm.prompts_per_step else 0
    )
    pipe = base.pipeline
    staleness = pipe.staleness
    if staleness.policy is StalenessPolicy.reject:
        staleness = staleness.model_copy(update={"policy": StalenessPolicy.bound})
    ws = pipe.weight_sync
    if interrupt is not None:
        ws = ws.model_copy(update={"interrupt": Interrupt(interrupt)})
    partial = PartialRollout(over_provision=over_provision, extra_prompts=extra)
    update = {"partial_rollout": partial, "staleness": staleness, "weight_sync": ws}
    return base.model_copy(update={"pipeline": pipe.model_copy(update=update)})


def agent_scenario(i: int, interrupt: str | None = None) -> Scenario:
    """Scenario number i with multi-turn agent episodes: a random, pressured (KV-bound: a kept
    cache crowds the engine, turns are preempted) or queue-bound base, every mode and
    interrupt, 1-6 turns, tool calls of tens of ms to seconds, kept or evicted caches, a limit
    on environments or none."""
    from rlsim.scenario import AgentLoop

    base = (random_scenario, pressured_scenario, queued_scenario)[i % 3](i // 3, interrupt)
    rng = np.random.default_rng(20000 + i)
    turns = (
        {"kind": "constant", "value": int(rng.integers(1, 5))}
        if rng.random() < 0.5
        else {"kind": "lognormal", "mean": float(rng.uniform(1.5, 4)), "sigma": 0.6, "max": 6}
    )
    agent = AgentLoop.model_validate(
        {
            "turns": turns,
            "tool_latency_s": {"mean_s": float(rng.uniform(0.02, 2.0)), "sigma": float(rng.choice([0.0, 0.8]))},
            "observation_tokens": {"kind": "lognormal", "mean": float(rng.uniform(10, 300)), "sigma": 0.7, "max": 2000},
            "kv_cache": str(rng.choice(["kept", "evicted"])),
            "environments": None if rng.random() < 0.5 else int(rng.integers(1, 9)),
        }
    )
    return base.model_copy(update={"workload": base.workload.model_copy(update={"agent": agent})})


def engine_scored_scenario(i: int) -> Scenario:
    """A reward model on the inference engines' GPUs (`with_inference`) over every other stage: a
    random, DAPO-filtering, KV-pressured, queue-bound or multi-turn agent base, every mode; a
    reward model, a judge that decodes a verdict, a teacher, batches of 2 to 16 completions.

    Its weights take KV room: a pressured base's memory share grows by their share of the GPU,
    so that the engines stay as crowded as the base made them.
    """
    from rlsim.catalog import get_llm
    from rlsim.models import footprint
    from rlsim.placement import resolve
    from rlsim.pools import INFERENCE

    makers = (random_scenario, filtering_scenario, pressured_scenario, queued_scenario, agent_scenario)
    base = makers[i % len(makers)](i // len(makers))
    rng = np.random.default_rng(30000 + i)
    kind = str(rng.choice(["reward_model", "generative_judge", "teacher", "process_reward"]))
    model = str(rng.choice(["qwen2.5-0.5b", "qwen2.5-1.5b"]))
    data = base.model_dump(mode="json")
    data["workload"]["reward"]["seconds_per_sample"] = 0.0  # the reward model is the one scoring stage
    data["pipeline"]["reward_model"] = {
        "kind": kind,
        "model": model,
        "placement": "with_inference",
        "max_batch_sequences": int(rng.choice([2, 4, 16])),
        "verdict_tokens": int(rng.integers(1, 32)) if kind == "generative_judge" else 0,
    }
    inf = data["pipeline"]["inference"]
    if inf["kv_memory_fraction"] < 0.5:  # a pressured base: keep its KV room
        memory_gb = resolve(base).profile_of(INFERENCE).memory_gb
        share = footprint.weight_bytes(get_llm(model)) / (memory_gb * 1e9 * inf["tp"])
        inf["kv_memory_fraction"] = round(inf["kv_memory_fraction"] + share, 6)
    data.pop("base_dir", None)
    return Scenario.model_validate(data)
