"""The configurations a plan considers, and pruning of those that cannot run.

A candidate fixes what the planner searches: GPU type (and, with `inference_gpu_types`, the
inference pool's own type), GPUs rented, pipeline mode, the inference/training split, the
inference engines' TP size, the buffer depth (async and streaming) and the weight-sync
interval. Everything else (model, workload, training parallelism, staleness policy, a reward
model's own pool) comes from the base scenario. Candidates are generated in a fixed order and
numbered; that index orders every result.

Pruning happens before any simulation: a candidate whose scenario fails validation or
`rlsim.placement.resolve` (weights or KV cache do not fit, TP does not divide the heads,
training state does not fit) is set aside with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from rlsim.catalog.gpus import get_gpu
from rlsim.errors import ScenarioError
from rlsim.errors_format import validation_lines
from rlsim.placement import Resolved, resolve
from rlsim.scenario import Mode, Scenario, set_path

DISAGGREGATED = (Mode.sync.value, Mode.one_step_off.value, Mode.async_.value, Mode.streaming.value)
RUNS_AHEAD = (Mode.async_.value, Mode.streaming.value)  # modes whose buffer depth is a knob
MAX_CANDIDATES = 10_000  # each is pruned, then simulated: --max-gpus 128 on one GPU makes ~8,500


@dataclass(frozen=True)
class SearchSpace:
    """The axes of a plan. Splits give the inference pool eighths of the GPUs (at least 1 each)."""

    max_gpus: int
    gpu_types: tuple[str, ...]
    modes: tuple[str, ...] = tuple(m.value for m in Mode)
    inference_tps: tuple[int, ...] = (1, 2, 4, 8)
    buffer_depths: tuple[int, ...] = (1, 2, 4)
    sync_every: tuple[int, ...] = (1, 2)
    colocated_sync_every: tuple[int, ...] = (1,)  # no library runs colocated on stale weights
    gpu_counts: tuple[int, ...] | None = field(default=None)  # default: see `cluster_sizes`
    max_candidates: int = MAX_CANDIDATES  # refuse a larger space before building it
    inference_gpu_types: tuple[str, ...] = ()  # the inference pool's GPU type per pool (default: the cluster's)


@dataclass(frozen=True)
class Candidate:
    """One configuration: index, GPU type and count, mode, split, TP, depth, sync interval."""

    index: int
    gpu: str
    gpus: int
    gpus_per_node: int
    mode: str
    inference_gpus: int  # the whole cluster when colocated
    inference_tp: int
    training_gpus: int
    buffer_depth: int | None  # None: the mode's own (sync, one-step-off, colocated)
    sync_every: int
    inference_gpu: str | None = None  # the inference pool's GPU type, when the plan searches it

    @property
    def pool_types(self) -> tuple[str, ...]:
        """The GPU types the candidate rents (the cluster's first)."""
        return tuple(dict.fromkeys((self.gpu, self.inference_gpu or self.gpu)))

    @property
    def label(self) -> str:
        pools = (
            f"{self.gpus} shared"
            if self.mode == Mode.colocated.value
            else f"{self.inference_gpus}i/{self.training_gpus}t"
        )
        if self.inference_gpu not in (None, self.gpu):
            pools = f"{self.inference_gpus}i {self.inference_gpu}/{self.training_gpus}t"
        depth = f" d{self.buffer_depth}" if self.buffer_depth is not None else ""
        return f"{self.gpus}x{self.gpu} {self.mode} {pools} tp{self.inference_tp}{depth} sync/{self.sync_every}"

    def settings(self) -> dict[str, Any]:
        """The scenario fields the candidate sets (dotted paths), as a `--set` would parse them."""
        colocated = self.mode == Mode.colocated.value
        out: dict[str, Any] = {
            "cluster.gpu": self.gpu,
            "cluster.nodes": self.gpus // self.gpus_per_node,
            "cluster.gpus_per_node": self.gpus_per_node,
            "pipeline.inference.gpus": None if colocated else self.inference_gpus,
            "pipeline.training.gpus": None if colocated else self.training_gpus,
            "pipeline.inference.tp": self.inference_tp,
            "pipeline.weight_sync.every_steps": self.sync_every,
        }
        if self.buffer_depth is not None:
            out["pipeline.buffer_depth"] = self.buffer_depth
        if self.inference_gpu is not None:  # searched: set even when it is the cluster's type
            out["pipeline.inference.gpu"] = self.inference_gpu
        return out

    def overrides(self) -> list[str]:
        """`settings` as `--set` overrides (`rlsim simulate --set ...` reproduces the candidate)."""
        return [f"{key}={'null' if value is None else value}" for key, value in self.settings().items()]


def cluster_sizes(max_gpus: int, gpus_per_node: int) -> list[int]:
    """GPU counts to rent: powers of two below a node, then whole nodes, up to `max_gpus`."""
    sizes = {2**k for k in range(gpus_per_node.bit_length()) if 2**k < gpus_per_node and 2**k <= max_gpus}
    sizes |= {n * gpus_per_node for n in range(1, max_gpus // gpus_per_node + 1)}
    if max_gpus < gpus_per_node:
        sizes.add(max_gpus)
    return sorted(sizes)


def _splits(gpus: int) -> list[int]:
    step = max(1, gpus // 8)
    return list(range(step, gpus, step))


def _layouts(space: SearchSpace, gpus: int, per_node: int) -> Iterator[tuple[str, int, int, int | None, int]]:
    """(mode, inference GPUs, TP, depth, sync interval) for one cluster size, in a fixed order."""
    for mode in space.modes:
        colocated = mode == Mode.colocated.value
        for inf in [gpus] if colocated else _splits(gpus):
            for tp in space.inference_tps:
                if inf % tp or tp > per_node:
                    continue
                intervals = space.colocated_sync_every if colocated else space.sync_every
                for depth in space.buffer_depths if mode in RUNS_AHEAD else [None]:
                    for every in intervals:
                        yield mode, inf, tp, depth, every


def generate(base: Scenario, space: SearchSpace) -> list[Candidate]:
    """Every candidate of the space, numbered in generation order (GPU, size, mode, split...)."""
    for m in space.modes:
        if m not in {x.value for x in Mode}:
            raise ScenarioError("--modes", f"unknown mode '{m}'; choose from {', '.join(x.value for x in Mode)}")
    if space.max_gpus < 1:
        raise ScenarioError("--max-gpus", f"must be >= 1, got {space.max_gpus}")
    node = base.cluster.gpus_per_node
    reward = base.reward_pool_gpus  # a reward model's own pool keeps its GPUs in every candidate
    inference_types = [get_gpu(g, field="--inference-gpu-types").key for g in space.inference_gpu_types] or [None]
    out: list[Candidate] = []
    for gpu in space.gpu_types:
        key = get_gpu(gpu, field="--gpu-types").key
        for gpus in space.gpu_counts or cluster_sizes(space.max_gpus, node):
            per_node = node if gpus % node == 0 else gpus
            for mode, inf, tp, depth, every in _layouts(space, gpus - reward, per_node):
                colocated = mode == Mode.colocated.value
                for inf_gpu in inference_types:
                    if colocated and inf_gpu not in (None, key):  # colocated pools share one GPU type
                        continue
                    if len(out) == space.max_candidates:
                        raise ScenarioError(
                            "--max-gpus",
                            f"the search space holds more than {space.max_candidates:,} configurations (up to "
                            f"{space.max_gpus:,} GPUs); narrow it (--max-gpus, --gpu-types, --modes) or raise "
                            "--max-candidates",
                        )
                    train = gpus - reward if colocated else gpus - reward - inf
                    out.append(Candidate(len(out), key, gpus, per_node, mode, inf, tp, train, depth, every, inf_gpu))
    return out


def candidate_scenario(base: Scenario, cand: Candidate) -> Scenario:
    """The base scenario under the candidate's mode (mode-implied knobs reset) and layout."""
    return CandidateScenarios(base).build(cand)


class CandidateScenarios:
    """`candidate_scenario` for many candidates of one base: the base's mapping under each mode
    is built once, and each candidate's fields are set in a copy and validated (no YAML)."""

    def __init__(self, base: Scenario) -> None:
        self.base = base
        self._modes: dict[str, dict[str, Any] | ScenarioError] = {}

    def _mapping(self, mode: str) -> dict[str, Any]:
        if mode not in self._modes:
            try:
                self._modes[mode] = self.base.with_mode(mode).model_dump(mode="json")
            except ScenarioError as exc:
                self._modes[mode] = exc
        out = self._modes[mode]
        if isinstance(out, ScenarioError):
            raise ScenarioError(out.field, out.reason)
        return out

    def build(self, cand: Candidate) -> Scenario:
        base = self.base
        data = dict(self._mapping(cand.mode))
        data.setdefault("base_dir", base.base_dir)
        settings = cand.settings()
        if base.profile is not None and cand.gpu != base.cluster.gpu:
            settings["profile"] = None  # a profile measured on another GPU does not apply
        for key, value in settings.items():
            set_path(data, key, value)
        return Scenario.model_validate(data)


@dataclass(frozen=True)
class Pruned:
    """A candidate set aside before simulation, and why."""

    candidate: Candidate
    reason: str


def steps_to_simulate(sc: Scenario, requested: int) -> int:
    """At least twice the pipeline fill (buffer depth + 1), so the steady step time is measured.

    A shorter simulation charges each candidate its pipeline fill as if every step paid it, which
    favours shallow pipelines more the fewer steps are simulated: the pick would move with --steps.
    """
    return max(requested, 2 * (sc.pipeline.depth + 1))


def prune(
    base: Scenario, cands: list[Candidate], sim_steps: int
) -> tuple[list[tuple[Candidate, Scenario]], list[Pruned]]:
    """Split candidates into runnable (with their scenario at `sim_steps`) and pruned ones."""
    keep: list[tuple[Candidate, Scenario]] = []
    pruned: list[Pruned] = []
    base = base.model_copy(update={"steps": sim_steps})
    scenarios = CandidateScenarios(base)
    for cand in cands:
        out = check(base, cand, scenarios)
        if isinstance(out, Pruned):
            pruned.append(out)
        else:
            keep.append((cand, out[0]))
    return keep, pruned


def check(
    base: Scenario, cand: Candidate, scenarios: CandidateScenarios | None = None
) -> tuple[Scenario, Resolved] | Pruned:
    """One candidate of `prune` (`base` already at the requested steps): its scenario and
    placement, or why it cannot run; `scenarios` builds them for `base` when the caller has one."""
    try:
        sc = (scenarios or CandidateScenarios(base)).build(cand)
        sc = sc.model_copy(update={"steps": steps_to_simulate(sc, base.steps)})
        return sc, resolve(sc)
    except ScenarioError as exc:
        return Pruned(cand, str(exc))
    except ValidationError as exc:
        return Pruned(cand, validation_lines(exc)[0])
