"""The GPU pools of a scenario, as one named list every output iterates.

A pool is a set of GPUs with one role: `inference` (the rollout engines), `training` (the
trainer) and, when a reward model has GPUs, `reward` (the scoring engines). Each has a GPU type
(feature "a GPU type per pool": H20 rollout beside H800 training) and, once resolved against the
catalog (`rlsim.placement`), the price of one of its GPU-hours. Metrics, tables, the report, the
trace lanes, cost and the planner walk this list instead of assuming two pools.

GPU ids are laid out in pool order: inference first, then training, then reward. A colocated
run's inference and training pools share the same GPUs (the trainer's work wins when busy); a
reward model placed `with_training` scores on the training pool's GPUs. A pool that shares GPUs
with another says so in `shares`; a GPU's state seconds then count in both pools, as they always
have for colocated runs. A reward model placed `with_inference` is no pool of its own: the
inference engines themselves score (simulator/engine_scoring.py), so its time is the inference
pool's `score` state.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsim.scenario import Mode, Scenario

INFERENCE, TRAINING, REWARD = "inference", "training", "reward"


@dataclass(frozen=True)
class Pool:
    """One pool: its name (the recorder's pool key), role, GPU ids, GPU type and price."""

    name: str
    role: str  # what runs there: rollout | train | a reward model's kind
    gpu_ids: tuple[int, ...]
    gpu: str  # catalog GPU type (or 'cpu')
    shares: str | None = None  # the pool whose GPUs this one runs on, if any
    usd_per_gpu_hour: float | None = None  # set by `rlsim.placement.resolve` (catalog default price)

    @property
    def gpus(self) -> int:
        return len(self.gpu_ids)


def pool_layout(sc: Scenario) -> tuple[Pool, ...]:
    """The scenario's pools with their GPU ids and types (no catalog look-up, no price)."""
    inf_gpus, tr_gpus = sc.pool_gpus
    pipe = sc.pipeline
    colocated = pipe.mode is Mode.colocated
    first_train = 0 if colocated else inf_gpus
    inference = Pool(INFERENCE, "rollout", tuple(range(inf_gpus)), pipe.inference.gpu or sc.cluster.gpu)
    training = Pool(
        TRAINING,
        "train",
        tuple(range(first_train, first_train + tr_gpus)),
        pipe.training.gpu or sc.cluster.gpu,
        shares=INFERENCE if colocated else None,
    )
    pools = [inference, training]
    rm = pipe.reward_model
    if rm is not None:
        if rm.placement == "own_pool":
            first = max(training.gpu_ids[-1], inference.gpu_ids[-1]) + 1
            pools.append(Pool(REWARD, rm.kind, tuple(range(first, first + rm.gpus)), rm.gpu or sc.cluster.gpu))
        elif rm.placement == "with_training":
            pools.append(Pool(REWARD, rm.kind, training.gpu_ids, training.gpu, shares=TRAINING))
    return tuple(pools)


def pool_named(pools: tuple[Pool, ...], name: str) -> Pool | None:
    return next((p for p in pools if p.name == name), None)


def mixed_gpu_types(pools: tuple[Pool, ...]) -> bool:
    """Whether the pools run on more than one GPU type."""
    return len({p.gpu for p in pools}) > 1


def gpus_text(sc: Scenario) -> str:
    """The rented GPUs in words: '16x h100-sxm', or per type when the pools' types differ
    ('8x h200 + 8x h100-sxm', GPUs no pool uses counted with the cluster's type)."""
    pools = [p for p in pool_layout(sc) if p.shares is None]
    if not mixed_gpu_types(tuple(pools)):
        return f"{sc.cluster.total_gpus}x {sc.cluster.gpu}"
    counts: dict[str, int] = {}
    for p in pools:
        counts[p.gpu] = counts.get(p.gpu, 0) + p.gpus
    spare = sc.cluster.total_gpus - sum(counts.values())
    if spare:
        counts[sc.cluster.gpu] = counts.get(sc.cluster.gpu, 0) + spare
    return " + ".join(f"{n}x {gpu}" for gpu, n in counts.items())
