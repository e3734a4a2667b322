"""Resolving a scenario against the catalog and checking that its placement can run.

Everything a user can get wrong that needs the catalog is found here, before any simulation,
and reported as one ScenarioError naming the field: an unknown GPU or model, TP that does not
divide the attention heads, a model whose weights (inference) or training state does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rlsim.calibration.profile import GIB_BYTES, Profile, resolve_profile
from rlsim.catalog import LlmSpec, get_gpu, get_llm, llm_from_hf_config
from rlsim.catalog.engines import get_engine
from rlsim.catalog.prices import default_price
from rlsim.errors import ScenarioError
from rlsim.models import footprint, memory
from rlsim.models.decode import vllm_graph_max_tokens
from rlsim.models.kv_cache import kv_budget_bytes, kv_capacity_tokens
from rlsim.notices import warn
from rlsim.pools import INFERENCE, REWARD, TRAINING, Pool, pool_layout
from rlsim.scenario import DataParallel, Inference, ModelConfigJson, RewardModel, Scenario, Training

MAX_SAMPLES_PER_STEP = 1_000_000  # completions per RL step (real runs use thousands)
MAX_SIMULATED_SAMPLES = 100_000_000  # completions in one simulation: hours of simulator time


@dataclass(frozen=True)
class Scoring:
    """A GPU reward model resolved: its spec and its LLM (its GPUs' profile: `Resolved.profile_of(pool)`).

    Placed `with_inference`, its spec's tp is the inference engines' and `pool` the inference pool.
    """

    spec: RewardModel
    llm: LlmSpec
    pool: str = REWARD  # the pool whose GPU profile prices its forwards


@dataclass(frozen=True)
class Resolved:
    """A scenario with its LLM, calibration profile, pools and derived capacities.

    `profile` is the cluster GPU's and every pool of that type runs at it (so replacing it
    reaches them all); `pool_profiles` holds the profile of each pool of another GPU type.
    """

    scenario: Scenario
    llm: LlmSpec
    profile: Profile
    kv_capacity_tokens: int  # per inference engine
    trainable_params: float
    decode_speed_vs_vllm: float = 1.0  # the engine profile's measured ratio (vLLM: exactly 1.0)
    pools: tuple[Pool, ...] = ()
    pool_profiles: dict[str, Profile] = field(default_factory=dict)
    scoring: Scoring | None = None  # a GPU reward model (None: the CPU verifier)
    graph_max_tokens: int | None = None  # the engines' largest CUDA-graph step (`cuda_graph_max_tokens`)

    def profile_of(self, pool: str) -> Profile:
        return self.pool_profiles.get(pool, self.profile)


def _pool_field(pool: Pool) -> str:
    return {INFERENCE: "pipeline.inference.gpu", TRAINING: "pipeline.training.gpu"}.get(
        pool.name, "pipeline.reward_model.gpu"
    )


def _resolve_pools(scenario: Scenario, profile: Profile) -> tuple[tuple[Pool, ...], dict[str, Profile]]:
    """Each pool's GPU type checked against the catalog, its profile and its default price.

    A pool of the cluster's type uses the scenario's profile; another type uses its datasheet.
    A type without a catalog price gets None (no dollars are shown for it).
    """
    pools, profiles = [], {}
    cpu = scenario.cluster.gpu == "cpu"
    cluster_key = "cpu" if cpu else get_gpu(scenario.cluster.gpu).key
    for pool in pool_layout(scenario):
        if pool.gpu == scenario.cluster.gpu:
            key = cluster_key
        elif pool.gpu == "cpu" or cpu:
            raise ScenarioError(_pool_field(pool), "the CPU device runs every pool: leave the pools' gpu unset")
        else:
            key = get_gpu(pool.gpu, field=_pool_field(pool)).key
        if key != cluster_key:
            profiles[pool.name] = resolve_profile(key, key, field=_pool_field(pool))
        pool = replace(pool, gpu=key)
        price = None
        if pool.gpu != "cpu":
            try:
                price = default_price(pool.gpu, gpus_per_node=scenario.cluster.gpus_per_node).usd_per_gpu_hour
            except ScenarioError:
                price = None
        pools.append(replace(pool, usd_per_gpu_hour=price))
    return tuple(pools), profiles


def _resolve_scoring(scenario: Scenario, cluster_profile: Profile, profiles: dict[str, Profile]) -> Scoring | None:
    """The reward model's LLM, checked: TP divides its heads, its weights fit a scoring engine."""
    rm = scenario.pipeline.reward_model
    if rm is None:
        return None
    if isinstance(rm.model, ModelConfigJson):
        llm = llm_from_hf_config(
            scenario.resolve_path(rm.model.config_json), field="pipeline.reward_model.model.config_json"
        )
    else:
        llm = get_llm(rm.model, field="pipeline.reward_model.model")
    pool = REWARD
    if rm.placement == "with_inference":  # the engines' TP group and GPUs (scenario.py checks a tp it was given)
        rm, pool = rm.model_copy(update={"tp": scenario.pipeline.inference.tp}), INFERENCE
    _check_tp(llm, rm.tp, "pipeline.reward_model.tp")
    profile = profiles.get(pool, cluster_profile)
    weights_gb = footprint.weight_bytes(llm) / 1e9
    if footprint.weight_bytes(llm) / rm.tp > profile.memory_bytes * 0.9:
        raise ScenarioError(
            "pipeline.reward_model.tp",
            f"{llm.name}'s {weights_gb:.0f} GB of bf16 weights do not fit {rm.tp} x {profile.memory_gib:.0f} GiB "
            "(90% usable): raise tp",
        )
    return Scoring(rm, llm, pool)


def graph_max_tokens(inference: Inference, gpu_key: str) -> int | None:
    """The engines' largest CUDA-graph step: the scenario's, or vLLM's default for their GPU ('auto').

    `gpu_key` is the inference pool's catalog key ('cpu': the CPU device, no compute capability).
    """
    value = inference.cuda_graph_max_tokens
    if value != "auto":
        return value
    capability = None if gpu_key == "cpu" else get_gpu(gpu_key).compute_capability
    return vllm_graph_max_tokens(capability.major if capability is not None else None)


def resolve_llm(scenario: Scenario) -> LlmSpec:
    if isinstance(scenario.model, ModelConfigJson):
        return llm_from_hf_config(scenario.resolve_path(scenario.model.config_json), field="model.config_json")
    return get_llm(scenario.model, field="model")


def _max_sequence_tokens(scenario: Scenario) -> int:
    wl = scenario.workload

    def cap(d) -> int:
        return d.value if d.kind == "constant" else d.max

    return cap(wl.prompt_tokens) + cap(wl.response_tokens)


def _check_context(scenario: Scenario, llm: LlmSpec) -> None:
    """Prompt plus response must fit the model's positions (max_position_embeddings).

    A length the user wrote (a constant, a `max`, a histogram's top bin) that does not fit is
    refused; the default `max` of a distribution only draws a warning, since the lengths actually
    drawn (from a file, say) may all fit.
    """
    wl, limit = scenario.workload, llm.max_position_embeddings

    def cap(d, name: str) -> tuple[int, str, bool]:
        if d.kind == "constant":
            return d.value, f"workload.{name}.value", True
        if "max" in d.model_fields_set:
            return d.max, f"workload.{name}.max", True
        if d.kind == "histogram":
            return min(d.max, max(hi for _, hi, _ in d.bins)), f"workload.{name}.bins", True
        return d.max, f"workload.{name}.max", False

    prompt, prompt_field, prompt_set = cap(wl.prompt_tokens, "prompt_tokens")
    response, response_field, response_set = cap(wl.response_tokens, "response_tokens")
    positions = f"{llm.name}'s {limit:,} positions (max_position_embeddings)"
    if prompt >= limit:
        text = f"{prompt:,} prompt tokens fill {positions}"
        if not prompt_set:
            warn(f"{prompt_field}: the default {text}; set max")
            return
        raise ScenarioError(prompt_field, text)
    if prompt + response > limit:
        text = f"{response:,} response tokens plus up to {prompt:,} prompt tokens exceed {positions}"
        if not response_set:
            warn(f"{response_field}: the default of {text}; set max to at most {limit - prompt:,}")
            return
        raise ScenarioError(response_field, f"{text}; use at most {limit - prompt:,}")


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
    states_gb = inf.max_batch * footprint.linear_state_bytes_per_sequence(llm, inf.tp) / 1e9
    beside = ""
    if states_gb:
        beside = f" beside max_batch={inf.max_batch} sequences' Gated DeltaNet states ({states_gb:.1f} GB per engine)"
    room = (
        f"{llm.name} ({weights_gb:.0f} GB of bf16 weights) leaves room for {capacity} KV tokens{beside} on an "
        f"engine of tp={inf.tp} x {profile.memory_gib:.0f} GiB at kv_memory_fraction={inf.kv_memory_fraction}; "
        f"one sequence needs up to {need}"
    )
    default = Inference.model_fields["kv_memory_fraction"].default
    at_default = kv_capacity_tokens(llm, profile, inf.tp, default, state_sequences=inf.max_batch)
    if inf.kv_memory_fraction < default and at_default >= need:
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
    _check_context(scenario, llm)
    spec = scenario.profile
    if spec and (spec.endswith(".json") or "/" in spec):
        spec = str(scenario.resolve_path(spec))  # relative to the scenario file, like every path
    profile = resolve_profile(spec, scenario.cluster.gpu, field="profile")
    pools, pool_profiles = _resolve_pools(scenario, profile)
    scoring = _resolve_scoring(scenario, profile, pool_profiles)
    cluster_profile, profile = profile, pool_profiles.get(INFERENCE, profile)  # generation checks: the engines' GPU
    inf, tr = scenario.pipeline.inference, scenario.pipeline.training
    _check_tp(llm, inf.tp, "pipeline.inference.tp")
    _check_tp(llm, tr.tp, "pipeline.training.tp")
    per_node = scenario.cluster.gpus_per_node
    if inf.tp > per_node and inf.tp % per_node:
        raise ScenarioError(
            "pipeline.inference.tp",
            f"tp={inf.tp} spans nodes of {per_node} GPUs but is not a multiple of {per_node}: an engine takes whole "
            "nodes once it spans several",
        )

    engine = get_engine(inf.engine.value)
    in_share = engine.reserve_in_fraction
    resident = footprint.weight_bytes(scoring.llm) if scoring is not None and scoring.pool == INFERENCE else 0.0
    states = inf.max_batch  # a hybrid model's running sequences each hold their Gated DeltaNet states
    budget = kv_budget_bytes(llm, profile, inf.tp, inf.kv_memory_fraction, in_share, resident, states)
    capacity = kv_capacity_tokens(llm, profile, inf.tp, inf.kv_memory_fraction, in_share, resident, states)
    need = _max_sequence_tokens(scenario)
    if resident and (budget <= 0 or capacity < need):
        raise ScenarioError(
            "pipeline.reward_model.placement",
            f"with_inference: {scoring.llm.name}'s {resident / 1e9:.0f} GB of bf16 weights beside {llm.name}'s "
            f"leave room for {capacity} KV tokens on an engine of tp={inf.tp} x {profile.memory_gib:.0f} GiB; one "
            f"sequence needs up to {need}: raise pipeline.inference.tp or use own_pool",
        )
    if budget <= 0 or capacity < need:
        raise _kv_does_not_fit(scenario, llm, profile, capacity, need)

    trainable = llm.total_params
    if scenario.pipeline.lora is not None:
        lora = scenario.pipeline.lora
        trainable = footprint.lora_params(llm, lora.rank, list(lora.target_modules))
    if tr.ep > 1 and (llm.moe is None or llm.moe.num_experts % tr.ep):
        reason = "is dense" if llm.moe is None else f"has {llm.moe.num_experts} experts"
        raise ScenarioError(
            "pipeline.training.ep", f"ep={tr.ep} needs experts to divide among ranks; {llm.name} {reason}"
        )
    _check_stage_layers(llm, tr)
    per_gpu = memory.train_bytes_per_gpu(
        llm,
        scenario.training_gpus,
        tr.tp,
        tr.micro_batch_tokens,
        tr.activation_recompute,
        trainable,
        tr.cp,
        pp=tr.pp,
        megatron=tr.data_parallel is DataParallel.megatron,
        ep=tr.ep,
        etp=tr.expert_tp,
    )
    profile = pool_profiles.get(TRAINING, cluster_profile)
    if per_gpu > profile.memory_bytes:
        megatron = tr.data_parallel is DataParallel.megatron
        raise ScenarioError(
            "pipeline.training.tp" if megatron else "pipeline.training.gpus",
            f"training {llm.name} needs {per_gpu / GIB_BYTES:.0f} GiB per GPU on "
            f"{scenario.training_gpus} GPUs (weights, grads, AdamW states, activations) but a GPU has "
            f"{profile.memory_gib:.0f} GiB: "
            + (
                f"raise tp or pp (Megatron keeps each TP x PP shard's weights and gradients whole; now tp={tr.tp}, "
                f"pp={tr.pp})"
                if megatron
                else "add training GPUs"
            )
            + (
                " or lower micro_batch_tokens"
                if tr.activation_recompute
                else ", enable activation_recompute or lower micro_batch_tokens"
            ),
        )
    engine_gpu = next(p.gpu for p in pools if p.name == INFERENCE)
    return Resolved(
        scenario,
        llm,
        cluster_profile,
        capacity,
        trainable,
        engine.decode_speed_vs_vllm(llm.total_params),
        pools,
        pool_profiles,
        scoring,
        graph_max_tokens(inf, engine_gpu),
    )


def _check_stage_layers(llm: LlmSpec, tr: Training) -> None:
    """Megatron-Core's uneven pipeline split: the middle stages share the layers left evenly."""
    first, last = tr.first_stage_layers, tr.last_stage_layers
    if first is None and last is None:
        return
    rest = llm.num_layers - (first or 0) - (last or 0)
    middle = tr.pp - (first is not None) - (last is not None)
    field = "pipeline.training.first_stage_layers" if first is not None else "pipeline.training.last_stage_layers"
    if rest < 0 or (middle == 0 and rest) or (middle and rest % middle):
        raise ScenarioError(
            field,
            f"{llm.name} has {llm.num_layers} layers: after first {first} and last {last}, {rest} must split "
            f"evenly over the {middle} middle pipeline stages (Megatron-Core get_num_layers_to_build)",
        )
