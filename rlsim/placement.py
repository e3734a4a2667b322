"""Resolving a scenario against the catalog and checking that its placement can run.

Everything a user can get wrong that needs the catalog is found here, before any simulation,
and reported as one ScenarioError naming the field: an unknown GPU or model, TP that does not
divide the attention heads, a model whose weights (inference) or training state does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsim.calibration.profile import Profile, resolve_profile
from rlsim.catalog import LlmSpec, get_gpu, get_llm, llm_from_hf_config
from rlsim.errors import ScenarioError
from rlsim.models import footprint, memory
from rlsim.models.kv_cache import kv_budget_bytes, kv_capacity_tokens
from rlsim.scenario import Inference, ModelConfigJson, Scenario

MAX_SAMPLES_PER_STEP = 1_000_000  # completions per RL step (real runs use thousands)
MAX_SIMULATED_SAMPLES = 100_000_000  # completions in one simulation: hours of simulator time


@dataclass(frozen=True)
class Resolved:
    """A scenario with its LLM, calibration profile and derived capacities."""

    scenario: Scenario
    llm: LlmSpec
    profile: Profile
    kv_capacity_tokens: int  # per inference engine
    trainable_params: float


def resolve_llm(scenario: Scenario) -> LlmSpec:
    if isinstance(scenario.model, ModelConfigJson):
        return llm_from_hf_config(scenario.resolve_path(scenario.model.config_json), field="model.config_json")
    return get_llm(scenario.model, field="model")


def _max_sequence_tokens(scenario: Scenario) -> int:
    wl = scenario.workload

    def cap(d) -> int:
        return d.value if d.kind == "constant" else d.max

    return cap(wl.prompt_tokens) + cap(wl.response_tokens)


def _check_tp(llm: LlmSpec, tp: int, field: str) -> None:
    if llm.num_attention_heads % tp:
        raise ScenarioError(field, f"tp={tp} does not divide {llm.name}'s {llm.num_attention_heads} attention heads")


def _kv_does_not_fit(scenario: Scenario, llm: LlmSpec, profile: Profile, capacity: int, need: int) -> ScenarioError:
    """The error for an engine without room for one sequence, naming the field to change.

    A memory share below the default that would fit at the default is the culprit; otherwise
    the engine is too small for the model and sequence, and TP is the field to raise.
    """
    inf = scenario.pipeline.inference
    weights_gb = footprint.weight_bytes(llm) / 1e9
    room = (
        f"{llm.name} ({weights_gb:.0f} GB of bf16 weights) leaves room for {capacity} KV tokens on an "
        f"engine of tp={inf.tp} x {profile.memory_gb:.0f} GB at kv_memory_fraction={inf.kv_memory_fraction}; "
        f"one sequence needs up to {need}"
    )
    default = Inference.model_fields["kv_memory_fraction"].default
    if inf.kv_memory_fraction < default and kv_capacity_tokens(llm, profile, inf.tp, default) >= need:
        return ScenarioError("pipeline.inference.kv_memory_fraction", f"{room}: raise kv_memory_fraction")
    return ScenarioError("pipeline.inference.tp", f"{room}: raise tp")


def _check_size(scenario: Scenario) -> None:
    """Refuse, up front, a simulation too large to finish (every sample is simulated)."""
    per_step = scenario.algorithm.samples_per_step
    if per_step > MAX_SAMPLES_PER_STEP:
        raise ScenarioError(
            "algorithm.prompts_per_step",
            f"prompts_per_step x group_size = {per_step:,} samples per step; rlsim simulates at most "
            f"{MAX_SAMPLES_PER_STEP:,} per step",
        )
    if per_step * scenario.steps > MAX_SIMULATED_SAMPLES:
        raise ScenarioError(
            "steps",
            f"{scenario.steps:,} steps x {per_step:,} samples = {per_step * scenario.steps:,} samples to simulate; "
            f"at most {MAX_SIMULATED_SAMPLES:,} (simulate fewer steps: `rlsim cost --steps` projects a long run)",
        )


def resolve(scenario: Scenario) -> Resolved:
    """Look everything up and check the placement; raises ScenarioError on the first problem."""
    _check_size(scenario)
    if scenario.cluster.gpu != "cpu":
        get_gpu(scenario.cluster.gpu, field="cluster.gpu")
    llm = resolve_llm(scenario)
    spec = scenario.profile
    if spec and (spec.endswith(".json") or "/" in spec):
        spec = str(scenario.resolve_path(spec))  # relative to the scenario file, like every path
    profile = resolve_profile(spec, scenario.cluster.gpu, field="profile")
    inf, tr = scenario.pipeline.inference, scenario.pipeline.training
    _check_tp(llm, inf.tp, "pipeline.inference.tp")
    _check_tp(llm, tr.tp, "pipeline.training.tp")
    if inf.tp > scenario.cluster.gpus_per_node:
        raise ScenarioError(
            "pipeline.inference.tp", f"tp={inf.tp} spans more than one node of {scenario.cluster.gpus_per_node} GPUs"
        )

    budget = kv_budget_bytes(llm, profile, inf.tp, inf.kv_memory_fraction)
    capacity = kv_capacity_tokens(llm, profile, inf.tp, inf.kv_memory_fraction)
    need = _max_sequence_tokens(scenario)
    if budget <= 0 or capacity < need:
        raise _kv_does_not_fit(scenario, llm, profile, capacity, need)

    trainable = llm.total_params
    if scenario.pipeline.lora is not None:
        lora = scenario.pipeline.lora
        trainable = footprint.lora_params(llm, lora.rank, list(lora.target_modules))
    per_gpu = memory.train_bytes_per_gpu(
        llm, scenario.training_gpus, tr.tp, tr.micro_batch_tokens, tr.activation_recompute, trainable
    )
    if per_gpu > profile.memory_gb * 1e9:
        raise ScenarioError(
            "pipeline.training.gpus",
            f"training {llm.name} needs {per_gpu / 1e9:.0f} GB per GPU on {scenario.training_gpus} GPUs "
            f"(weights, grads, AdamW states, activations) but a GPU has {profile.memory_gb:.0f} GB: "
            "add training GPUs, enable activation_recompute or lower micro_batch_tokens",
        )
    return Resolved(scenario, llm, profile, capacity, trainable)
