"""Library presets: loading, provenance, the overlay contract, and the orderings the
architectures imply on a long-tailed workload with the same GPUs.

Every preset runs on the built-in default (7B, 8 GPUs, long tail) and long-CoT (32B, 16 GPUs)
scenarios; runs are kept short (3 steps, 8 prompts) and shared through module fixtures.
"""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from rlsim.catalog import get_llm
from rlsim.errors import ScenarioError
from rlsim.models import weight_sync
from rlsim.presets import (
    Preset,
    apply_preset,
    compare_presets,
    deep_merge,
    get_preset,
    list_presets,
    preset_axes,
)
from rlsim.presets.library import PRESET_DIR
from rlsim.runs import run_mode
from rlsim.scenario import Scenario, load_scenario, scenario_from_dict

NAMES = [p.name for p in list_presets()]
SHORT = ["steps=3", "algorithm.prompts_per_step=8"]
NETWORK = ("nccl_broadcast", "nccl_bucketed", "filesystem")

# The axes each preset must resolve to, with the library knob (and default) they come from; the
# sources themselves are cited inside each YAML file. (mode, depth, transport, interrupt,
# staleness policy, max_lag, lora support)
EXPECTED = {
    # hybrid_engine=true; fsdp_vllm.py load_weights in place; sleep/wake around generation
    "verl": ("colocated", 0, "cuda_ipc", "blocking", "bound", 0, "adapter_sync"),
    # one_step_off_policy recipe: one batch ahead, tensor-by-tensor NCCL broadcast
    "verl-one-step-off": ("one_step_off", 1, "nccl_broadcast", "blocking", "bound", 1, "adapter_sync"),
    # staleness_threshold=0.1 -> 1, partial_rollout=True, checkpoint_engine 4096 MiB, gen_batch_size=1
    "verl-fully-async": ("async", 1, "nccl_bucketed", "abort_resubmit", "importance_sampling", 1, "adapter_sync"),
    # vllm_mode="colocate", in-process load
    "trl-colocate": ("colocated", 0, "cuda_ipc", "blocking", "bound", 0, "full_sync"),
    # vllm_mode="server" (default), NCCLWeightTransferEngine packed=True
    "trl-server": ("sync", 0, "nccl_bucketed", "blocking", "bound", 0, "full_sync"),
    # max_staleness=4 (discard), max_inflight_tasks = 4 steps, pause(mode=keep), weight_sync_steps=1
    "trl-async": ("async", 4, "nccl_bucketed", "abort_resubmit", "reject", 4, "full_sync"),
    # --colocate_all_models, use_cuda_ipc
    "openrlhf": ("colocated", 0, "cuda_ipc", "blocking", "bound", 0, "full_sync"),
    # --async_train, --async_queue_size=1, VLLMLock, per-parameter broadcast
    "openrlhf-async": ("async", 1, "nccl_broadcast", "blocking", "bound", 1, "full_sync"),
    # in-flight weight updates, max_lag (version tags), weight_update_interval=1
    "pipelinerl": ("streaming", 2, "nccl_broadcast", "in_flight", "reject", 2, "full_sync"),
    # max_head_offpolicyness=2 (example), decoupled loss, xccl, abort_all_requests + resubmit
    "areal": ("async", 2, "nccl_bucketed", "abort_resubmit", "importance_sampling", 2, "adapter_sync"),
    # max_async_level=1, max_off_policy_steps=8, filesystem broadcast
    "prime-rl": ("async", 1, "filesystem", "in_flight", "reject", 8, "adapter_sync"),
    # colocate_all=true, offload_after_step=true
    "skyrl": ("colocated", 0, "cuda_ipc", "blocking", "bound", 0, "adapter_sync"),
    # fully_async.max_staleness_steps=1 (example), abort + retry with prefix, nccl
    "skyrl-fully-async": ("async", 1, "nccl_broadcast", "abort_resubmit", "bound", 1, "adapter_sync"),
    # --colocate (train.py)
    "slime": ("colocated", 0, "cuda_ipc", "blocking", "bound", 0, "none"),
    # train_async.py, --update-weight-buffer-size 512 MiB, TIS
    "slime-async": ("one_step_off", 1, "nccl_bucketed", "blocking", "importance_sampling", 1, "none"),
    # train_async.py + validate_async_off_policy_correction
    "miles": ("one_step_off", 1, "nccl_bucketed", "blocking", "importance_sampling", 1, "adapter_sync"),
    # async_steps=1, inflight_updates=True
    "open-instruct": ("async", 1, "nccl_broadcast", "in_flight", "bound", 1, "none"),
    # generation.colocated.enabled=true
    "nemo-rl": ("colocated", 0, "cuda_ipc", "blocking", "bound", 0, "full_sync"),
    # async_grpo, max_trajectory_age_steps=1, in_flight_weight_updates=false
    "nemo-rl-async": ("async", 1, "nccl_bucketed", "soft_pause", "reject", 1, "full_sync"),
    # ... in_flight_weight_updates=true
    "nemo-rl-async-inflight": ("async", 1, "nccl_bucketed", "in_flight", "reject", 1, "full_sync"),
    # shared mode, sleep mode, LoRA adapter swap
    "art": ("colocated", 0, "lora_adapter", "blocking", "bound", 0, "only"),
    # max_batches_offpolicy=3, filesystem + restart
    "atropos": ("async", 3, "filesystem", "blocking", "bound", 3, "adapter_sync"),
    # survey: double buffer, per-param NCCL, IS
    "oat": ("one_step_off", 1, "nccl_broadcast", "blocking", "importance_sampling", 1, "adapter_sync"),
    # async_generation_ratio=1
    "roll-async": ("async", 1, "nccl_broadcast", "blocking", "importance_sampling", 1, "full_sync"),
    # survey: bounded queue, max_policy_age rejection
    "torchforge": ("async", 1, "nccl_bucketed", "blocking", "reject", 1, "none"),
    # survey: bounded queue + sync per step
    "tunix": ("async", 1, "nccl_bucketed", "blocking", "bound", 1, "adapter_sync"),
    # survey: depth-1 FIFO, PyNCCL
    "verifiers-rl": ("one_step_off", 1, "nccl_broadcast", "blocking", "bound", 1, "adapter_sync"),
}

SURVEY_LIBRARIES = {
    "AReaL", "ART", "Atropos", "MILES", "NeMo-RL", "OAT", "open-instruct", "PipelineRL", "PRIME-RL",
    "ROLL", "SkyRL", "SLIME", "TorchForge", "Tunix", "verl", "verifiers-rl",
}  # fmt: skip


@pytest.fixture(scope="module")
def scenarios() -> dict[str, Scenario]:
    return {name: load_scenario(name, SHORT) for name in ("default", "long-cot")}


@pytest.fixture(scope="module")
def runs(scenarios):
    """Every preset on both built-in scenarios: {scenario: {preset: ModeRun}}."""
    rows = {base: compare_presets(sc) for base, sc in scenarios.items()}
    return {base: {row.preset.name: row.run for row in r if row.run is not None} for base, r in rows.items()}


def _with(sc: Scenario, **pipeline) -> Scenario:
    """The scenario with pipeline fields replaced (nested mappings merged)."""
    data = deep_merge(sc.model_dump(mode="json"), {"pipeline": pipeline})
    return scenario_from_dict(data, base_dir=sc.base_dir)


def _engine_gpu_s(run) -> float:
    return sum(run.metrics.pools[0].gpu_seconds_by_state.values())


# ---------------------------------------------------------------- loading and provenance


def test_presets_cover_the_survey_and_the_requested_modes():
    assert set(EXPECTED) == set(NAMES)
    assert SURVEY_LIBRARIES | {"TRL", "OpenRLHF"} == {p.library for p in list_presets()}
    assert NAMES == sorted(NAMES)
    assert [p.stem for p in sorted(PRESET_DIR.glob("*.yaml"), key=lambda p: p.stem)] == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_axes_match_their_sources(name):
    p = get_preset(name)
    a = preset_axes(p)
    mode, depth, transport, interrupt, policy, max_lag, lora = EXPECTED[name]
    assert (a.mode, int(a.buffer_depth), a.transport, a.interrupt, p.lora) == (mode, depth, transport, interrupt, lora)
    sc = apply_preset(load_scenario(None), name)
    assert (sc.pipeline.staleness.policy.value, sc.pipeline.staleness.max_lag) == (policy, max_lag)


@pytest.mark.parametrize("name", NAMES)
def test_every_claim_has_a_dated_source_and_an_inline_citation(name):
    p = get_preset(name)
    for s in p.sources:
        assert re.search(r"@[0-9a-f]{40}\b|\b20\d\d-\d\d(-\d\d)?\b|\b0\.\d+\.\d+\b|commit not recorded", s), s
    text = (PRESET_DIR / f"{name}.yaml").read_text()
    overlay = text.split("\noverlay:\n", 1)[1]
    for line in overlay.splitlines():
        if line.strip().startswith(("mode:", "buffer_depth:", "staleness:", "transport:", "interrupt:")):
            assert "#" in line, f"{name}: axis without its library knob or source: {line.strip()}"


def test_get_preset_unknown_name_suggests_the_closest():
    with pytest.raises(ScenarioError, match=r"unknown preset 'verl-fullyasync'.*'verl-fully-async'"):
        get_preset("verl-fullyasync")


@pytest.mark.parametrize("overlay", [
    {"cluster": {"nodes": 2}},
    {"model": "qwen2.5-7b"},
    {"pipeline": {"inference": {"gpus": 2}}},
    {"pipeline": {"training": {"gpus": 2}}},
    {"pipeline": {"lora": {"rank": 8}}},
    {"steps": 3},
])  # fmt: skip
def test_an_overlay_may_only_set_pipeline_axes(overlay):
    meta = get_preset("verl").model_dump()
    with pytest.raises(ValidationError, match="not a pipeline axis"):
        Preset.model_validate({**meta, "overlay": overlay})


def test_deep_merge_overlay_wins_and_mappings_merge():
    base = {"a": 1, "p": {"x": 1, "y": {"k": 1, "j": 2}}, "q": {"z": 1}}
    out = deep_merge(base, {"p": {"y": {"k": 9}}, "q": None, "n": 3})
    assert out == {"a": 1, "p": {"x": 1, "y": {"k": 9, "j": 2}}, "q": None, "n": 3}
    assert base["p"]["y"]["k"] == 1  # inputs untouched


# ---------------------------------------------------------------- the overlay contract


@pytest.mark.parametrize("name", NAMES)
def test_apply_preset_keeps_model_workload_and_gpu_budget(name):
    sc = load_scenario("long-cot")
    out = apply_preset(sc, name)
    assert out.name == f"{sc.name}+{name}"
    assert (out.model, out.cluster, out.workload, out.algorithm, out.steps, out.seed) == (
        sc.model,
        sc.cluster,
        sc.workload,
        sc.algorithm,
        sc.steps,
        sc.seed,
    )
    assert out.pipeline.inference.tp == sc.pipeline.inference.tp
    if out.pipeline.mode.value == "colocated":
        assert out.pool_gpus == (sc.cluster.total_gpus, sc.cluster.total_gpus)
    else:
        assert out.pool_gpus == sc.pool_gpus


def test_lora_rules():
    sc = load_scenario(None, ["pipeline.lora={rank: 16}"])
    with pytest.raises(ScenarioError, match="pipeline.lora: preset 'slime' models SLIME, which has no LoRA"):
        apply_preset(sc, "slime")
    assert apply_preset(sc, "verl").pipeline.transport.value == "lora_adapter"  # adapter-only sync
    assert apply_preset(sc, "pipelinerl").pipeline.transport.value == "nccl_broadcast"  # full weights sync
    art = apply_preset(load_scenario(None), "art")
    assert art.pipeline.lora is not None and art.pipeline.lora.rank == get_preset("art").lora_rank
    assert apply_preset(sc, "art").pipeline.lora.rank == 16  # the user's adapter is kept


def test_presets_without_tp_or_pp_force_them_to_one():
    sc = load_scenario("llama70b-multinode")
    assert sc.pipeline.training.tp > 1 or sc.pipeline.training.pp > 1
    for name in ("pipelinerl", "open-instruct", "verifiers-rl", "atropos"):
        out = apply_preset(sc, name)
        assert (out.pipeline.training.tp, out.pipeline.training.pp) == (1, 1)
    assert apply_preset(sc, "verl").pipeline.training == sc.pipeline.training  # Megatron keeps the user's


# ---------------------------------------------------------------- every preset runs


MEGATRON_TP1_REFUSED = MEGATRON_PRESETS = {"slime", "slime-async", "miles"}


def test_a_megatron_preset_refuses_a_model_its_tp1_shard_cannot_hold(runs):
    from rlsim.presets.compare import compare_presets

    rows = {r.preset.name: r for r in compare_presets(load_scenario("long-cot"), sorted(MEGATRON_TP1_REFUSED))}
    for name in MEGATRON_TP1_REFUSED:
        assert rows[name].run is None and "pipeline.training.tp" in rows[name].error, name
    with_tp = load_scenario("long-cot", ["pipeline.training.tp=8"])
    assert all(r.run is not None for r in compare_presets(with_tp, sorted(MEGATRON_TP1_REFUSED)))


@pytest.mark.parametrize("base", ["default", "long-cot"])
def test_every_preset_runs_on_the_builtin_scenarios(runs, base):
    # on long-cot a 32B Megatron trainer at tp=pp=1 keeps 128 GB of weights and gradients per GPU
    refused = MEGATRON_TP1_REFUSED if base == "long-cot" else set()
    assert set(runs[base]) == set(NAMES) - refused
    for name, run in runs[base].items():
        m = run.metrics
        assert m.steps == 3 and m.step_time_s > 0 and m.rollouts_per_s > 0, name
        assert m.mode == EXPECTED[name][0]
        assert run.cost is not None and run.cost.usd_per_step > 0


def test_compare_presets_sorts_by_cost_and_reports_what_cannot_run():
    sc = load_scenario(None, SHORT + ["pipeline.lora={rank: 8}"])
    rows = compare_presets(sc, ["slime", "verl", "trl-server", "pipelinerl"])
    ok = [r for r in rows if r.run is not None]
    assert [r.preset.name for r in rows][-1] == "slime" and "no LoRA" in rows[-1].error
    costs = [r.run.cost.usd_per_step for r in ok]
    assert costs == sorted(costs) and len(ok) == 3


# ---------------------------------------------------------------- orderings the architectures imply


@pytest.mark.parametrize("base", ["default", "long-cot"])
def test_colocated_sync_moves_no_weights_over_the_network(scenarios, runs, base):
    """Colocated presets reshard in place (CUDA IPC / adapter swap): no transfer between pools.

    On one node (default) every shard group gathers over NVLink, so a colocated update is cheaper
    than any bucketed or filesystem update, which adds the transfer. Across nodes (long-cot) the
    colocated FSDP group spans both nodes and gathers its fp32 shards over the network, which can
    cost more than a one-node pool's gather plus the bf16 broadcast: no ordering is implied there.
    """
    colocated = {n: r for n, r in runs[base].items() if r.metrics.mode == "colocated"}
    networked = {n: r for n, r in runs[base].items() if preset_axes(get_preset(n)).transport in NETWORK}
    ran = set(NAMES) - (MEGATRON_TP1_REFUSED if base == "long-cot" else set())
    assert len(colocated) == 7 - len({"slime"} - ran) and len(networked) == 20 - len({"slime-async", "miles"} - ran)
    for name in colocated:
        assert preset_axes(get_preset(name)).transport in ("cuda_ipc", "lora_adapter")
    if base == "default":
        worst_local = max(r.metrics.weight_sync_s for r in colocated.values())
        # like with like: FSDP pools gather fp32 shards; a Megatron pool (slime, miles) gathers bf16,
        # which can undercut a colocated FSDP update
        serial = [
            r
            for n, r in networked.items()
            if preset_axes(get_preset(n)).transport != "nccl_broadcast" and n not in MEGATRON_PRESETS
        ]
        assert worst_local < min(r.metrics.weight_sync_s for r in serial)
    # verl one-step-off's per-tensor loop costs at least its host work; on one node its transfers
    # hide under it: 339 tensors of a 7B at 1 ms (its README: "under 300ms")
    one_step_off = runs[base]["verl-one-step-off"].metrics.weight_sync_s
    host = weight_sync.tensor_count(get_llm(scenarios[base].model)) * weight_sync.TENSOR_HOST_S
    assert one_step_off >= host - 1e-12
    if base == "default":
        assert one_step_off == pytest.approx(host)


@pytest.mark.parametrize("base", ["default", "long-cot"])
def test_async_and_one_step_off_beat_the_synchronous_loop(runs, base):
    """Same 4+4 (8+8) GPU split: overlapping generation and training shortens the step."""
    sync = runs[base]["trl-server"].metrics.step_time_s
    overlapped = [n for n, r in runs[base].items() if r.metrics.mode in ("one_step_off", "async", "streaming")]
    assert len(overlapped) == 19 - (2 if base == "long-cot" else 0)  # slime-async and miles refused there
    for name in overlapped:
        assert runs[base][name].metrics.step_time_s < sync, name
    # the same library with only the mode changed
    one_off = runs[base]["verl-one-step-off"]
    as_sync = run_mode(_with(one_off.scenario, mode="sync"))
    assert one_off.metrics.step_time_s < as_sync.metrics.step_time_s


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_in_flight_updates_spend_no_more_engine_time_than_draining(seed):
    """NeMo-RL async with in_flight_weight_updates on vs off (drain before refit), nothing else
    changed: the same steps and tokens take no more engine GPU-seconds when sequences keep
    decoding through a weight update. (Idle seconds alone are not the measure: a drain shows up
    as decode at a shrinking batch, and the engine time it saves is partly spent waiting for
    the trainer; see docs/presets.md.)"""
    sc = load_scenario(None, ["steps=6", "algorithm.prompts_per_step=16", f"seed={seed}"])
    in_flight = run_mode(apply_preset(sc, "nemo-rl-async-inflight"))
    drain = run_mode(apply_preset(sc, "nemo-rl-async"))
    assert in_flight.metrics.generated_tokens == drain.metrics.generated_tokens
    assert _engine_gpu_s(in_flight) <= _engine_gpu_s(drain)
    assert in_flight.metrics.step_time_s <= drain.metrics.step_time_s


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_streaming_in_flight_beats_a_drain_on_long_cot(seed):
    """PipelineRL's stream with its in-flight update swapped for a drain, on the long-CoT workload
    (9K-token mean, 32K max) where sequences outlive several updates. Both keep every sample
    (importance sampling) so only the interrupt differs: under PipelineRL's own `reject`, in-flight
    sequences start on older weights and more of them are dropped (18.8% vs 9.8% of tokens at
    seed 0), which can outweigh the drain it saves (docs/LOG.md). On the 7B default workload the
    two are within a few percent either way over 6-8 steps (docs/presets.md)."""
    stream = apply_preset(
        load_scenario("long-cot", ["steps=6", "algorithm.prompts_per_step=16", f"seed={seed}"]), "pipelinerl"
    )
    stream = _with(stream, staleness={"policy": "importance_sampling"})
    assert _engine_gpu_s(run_mode(stream)) <= _engine_gpu_s(
        run_mode(_with(stream, weight_sync={"interrupt": "soft_pause"}))
    )


@pytest.mark.parametrize("base", ["default", "long-cot"])
def test_version_rejection_drops_tokens_where_importance_sampling_drops_none(runs, base):
    sc = apply_preset(load_scenario(base, ["steps=6", "algorithm.prompts_per_step=16"]), "pipelinerl")
    rejected = run_mode(_with(sc, staleness={"policy": "reject", "max_lag": 1})).metrics
    corrected = run_mode(_with(sc, staleness={"policy": "importance_sampling", "max_lag": 1})).metrics
    assert rejected.dropped_tokens > 0 and rejected.dropped_token_fraction > 0.05
    assert corrected.dropped_tokens == 0
    for name, run in runs[base].items():  # no IS-corrected preset ever drops a token
        if get_preset(name).overlay["pipeline"]["staleness"]["policy"] == "importance_sampling":
            assert run.metrics.dropped_tokens == 0, name


def test_docs_name_every_preset():
    from pathlib import Path

    docs = (Path(__file__).parents[1] / "docs" / "presets.md").read_text()
    for name in NAMES:
        assert f"`{name}`" in docs, name
