"""Expert tensor parallelism (`training.etp`, Megatron-Core's MoE parallel folding), pinned by hand.

The expert layers get their own layout, etp x ep x expert-DP x pp = the training GPUs, so a
layout whose EP group is wider than its DP x CP ranks runs once etp is below tp (NeMo RL's
Qwen3-235B recipes: TP2 CP2 PP8 EP16 with expert_tensor_parallel_size 1). etp sizes the routed
experts' shards (memory), the tokens each GPU dispatches and gathers (all-to-all), the TP
collectives a MoE layer trades, and the group the all-to-all crosses. etp = tp (the default)
leaves every figure as it was.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from cli_helpers import one_line_error

from rlsim.calibration.profile import LinkFit
from rlsim.catalog import get_llm
from rlsim.models import footprint, train_step
from rlsim.models.memory import train_bytes_per_gpu
from rlsim.placement import resolve
from rlsim.scenario import load_scenario
from rlsim.simulator.costs import Costs

Q235 = get_llm("qwen3-235b-a22b")
Q30 = get_llm("qwen3-30b-a3b")
DSV3 = get_llm("deepseek-v3")
LINK = LinkFit(busbw_gbps=100.0, latency_s=1e-5)

# Qwen3-235B-A22B as NeMo RL v0.4's on-policy recipe lays it out: 128 GPUs, TP2 CP2 PP8 EP16
# (DP 4), on the moe example's H200 cluster widened to 16 nodes
Q235_LAYOUT = [
    "model=qwen3-235b-a22b",
    "cluster.nodes=16",
    "pipeline.mode=colocated",
    "pipeline.inference.tp=16",
    "pipeline.inference.gpus=null",
    "pipeline.training.gpus=null",
    "pipeline.training.data_parallel=megatron",
    "pipeline.training.tp=2",
    "pipeline.training.cp=2",
    "pipeline.training.pp=8",
    "pipeline.training.ep=16",
    "pipeline.training.micro_batch_tokens=8192",
    "workload.response_tokens.max=8000",
    "workload.prompt_tokens.max=192",
]


def _shape(**kw) -> train_step.TrainShape:
    base = dict(
        gpus=16,
        tp=2,
        pp=1,
        micro_batch_tokens=4096,
        activation_recompute=False,
        minibatches=1,
        trainable_params=Q30.total_params,
        ep=8,
    )
    return train_step.TrainShape(**(base | kw))


def test_etp_defaults_to_tp_and_ep_times_etp_must_divide_a_pipeline_stage() -> None:
    sc = load_scenario("moe-qwen3-30b", ["pipeline.training.tp=2"])
    assert sc.pipeline.training.etp is None and sc.pipeline.training.expert_tp == 2
    # TP2 CP2 PP8 on 128 GPUs leaves DP 4: a stage has 2 x 2 x 4 = 16 GPUs, EP16 x ETP2 = 32 do not fit
    with pytest.raises(ValueError, match=r"pipeline.training.ep=16 x etp=2 must divide the 16 GPUs"):
        load_scenario("moe-qwen3-30b", Q235_LAYOUT)
    folded = load_scenario("moe-qwen3-30b", [*Q235_LAYOUT, "pipeline.training.etp=1"])
    assert folded.pipeline.training.expert_tp == 1
    resolve(folded)  # and it fits in memory


def test_a_layout_that_does_not_fold_is_one_line_naming_the_field() -> None:
    args = ["simulate", "moe-qwen3-30b", "--mode", "colocated", "--steps", "1"]
    line = one_line_error(args + [a for s in Q235_LAYOUT for a in ("--set", s)])
    assert "pipeline.training.ep" in line and "etp" in line


def test_etp_splits_the_routed_experts_of_a_stage_in_place_of_tp() -> None:
    p = Q235.total_params
    routed = 94 * 128 * 3 * 4096 * 1536  # every layer MoE: 128 experts of 3 x 4096 x 1536
    act = 2.0 * Q235.hidden_size * Q235.num_layers * 8192 / (2 * 2)  # recompute, tp 2, cp 2
    kw = dict(cp=2, pp=8, megatron=True, ep=16)
    by_tp = train_bytes_per_gpu(Q235, 128, 2, 8192, True, p, **kw)
    etp1 = train_bytes_per_gpu(Q235, 128, 2, 8192, True, p, **kw, etp=1)
    opt = 12.0 * p / 128  # every parameter's optimizer state once over the pool, either way
    assert by_tp == pytest.approx(4.0 * ((p - routed) / 2 + routed / 32) / 8 + opt + act)
    assert etp1 == pytest.approx(4.0 * ((p - routed) / 2 + routed / 16) / 8 + opt + act)
    assert train_bytes_per_gpu(Q235, 128, 2, 8192, True, p, **kw, etp=2) == by_tp
    # an expert whole on its GPU doubles that GPU's expert weights and gradients at TP2
    kept_by_tp = (p - routed) / 2 + routed / 32
    assert (etp1 - opt - act) / (by_tp - opt - act) == pytest.approx(1.0 + routed / 32 / kept_by_tp)


def test_at_etp_1_a_gpu_dispatches_only_its_own_share_of_the_tokens() -> None:
    per_rank = 8192.0  # tokens of one data-parallel rank (2 GPUs of TP)
    by_tp = train_step.all_to_all_s(Q30, _shape(a2a_link=LINK), per_rank)
    etp1 = train_step.all_to_all_s(Q30, _shape(a2a_link=LINK, etp=1), per_rank)
    volume = per_rank / 2 * Q30.moe.experts_per_token * Q30.hidden_size * footprint.BF16_BYTES  # its half
    layers = footprint.moe_layers(Q30)
    assert etp1 == pytest.approx(layers * 2 * (LINK.latency_s + volume * 7 / 8 / 100e9), rel=1e-12)
    # etp = tp: the all-to-all and the gather over the expert-TP group move every copy of the rank
    assert by_tp == pytest.approx(layers * 2 * (LINK.latency_s + 2 * volume * 7 / 8 / 100e9), rel=1e-12)
    assert train_step.all_to_all_s(Q30, _shape(a2a_link=LINK, etp=2), per_rank) == by_tp


def test_a_gpu_trades_only_its_pipeline_stages_layers() -> None:
    """Qwen3-30B-A3B (48 MoE layers) at PP4: a GPU's stage holds 12 of them, and dispatches for those."""
    per_rank = 8192.0
    flat = train_step.all_to_all_s(Q30, _shape(a2a_link=LINK), per_rank)
    staged = train_step.all_to_all_s(Q30, _shape(a2a_link=LINK, pp=4), per_rank)
    assert staged == pytest.approx(flat / 4, rel=1e-12)
    q7 = get_llm("qwen2.5-7b")
    cp = train_step.all_to_all_s(q7, _shape(a2a_link=LINK, cp=2, ep=1, trainable_params=q7.total_params), per_rank)
    cp_pp2 = train_step.all_to_all_s(
        q7, _shape(a2a_link=LINK, cp=2, ep=1, pp=2, trainable_params=q7.total_params), per_rank
    )
    assert cp_pp2 == pytest.approx(cp / 2, rel=1e-12)  # 28 layers over 2 stages: 14 each


def test_at_etp_1_a_moe_layer_trades_only_its_attentions_tp_collectives() -> None:
    nvlink = LinkFit(busbw_gbps=360.0, latency_s=2e-5)
    shape = _shape(tp_link=nvlink)
    by_tp = train_step.tp_comm_s(Q30, shape, 16 * 4096, 16, 2.0)
    etp1 = train_step.tp_comm_s(Q30, replace(shape, etp=1), 16 * 4096, 16, 2.0)
    assert etp1 == pytest.approx(by_tp / 2)  # every Qwen3-30B-A3B layer is MoE, none has a shared expert
    one = nvlink.latency_s + 1 / 2 * 4096 * Q30.hidden_size * 2 / 360e9
    assert etp1 == pytest.approx(16 * 2.0 * Q30.num_layers * 2 * one)
    # DeepSeek-V3's shared expert is a TP MLP: its layers keep the MLP's pair at etp 1
    ds = replace(shape, trainable_params=DSV3.total_params)
    assert train_step.tp_comm_s(DSV3, replace(ds, etp=1), 65536, 16, 2.0) == train_step.tp_comm_s(
        DSV3, ds, 65536, 16, 2.0
    )


def test_the_ep_group_spans_etp_x_ep_gpus_and_sets_the_all_to_all_link() -> None:
    args = ["pipeline.training.gpus=8", "pipeline.inference.gpus=8", "cluster.nodes=2"]
    args += ["pipeline.training.tp=2", "pipeline.training.ep=4", "pipeline.training.data_parallel=megatron"]
    by_tp = Costs(resolve(load_scenario("moe-qwen3-30b", args)))
    etp1 = Costs(resolve(load_scenario("moe-qwen3-30b", [*args, "pipeline.training.etp=1"])))
    assert by_tp.train_shape.etp is None and etp1.train_shape.etp == 1
    assert by_tp.train_shape.a2a_link == by_tp.train_profile.intra_node  # 2 x 4 GPUs: one node
    wide = ["pipeline.training.gpus=16", "pipeline.inference.gpus=8", "cluster.nodes=3"]
    wide += ["pipeline.training.tp=2", "pipeline.training.ep=8", "pipeline.training.data_parallel=megatron"]
    spans = Costs(resolve(load_scenario("moe-qwen3-30b", wide)))
    fits = Costs(resolve(load_scenario("moe-qwen3-30b", [*wide, "pipeline.training.etp=1"])))
    assert spans.train_shape.a2a_link == spans.train_profile.inter_node  # 2 x 8 GPUs: two nodes
    assert fits.train_shape.a2a_link == fits.train_profile.intra_node  # 1 x 8: one node
    lengths = [4096] * 256
    assert fits.train_phases(lengths).train_s < spans.train_phases(lengths).train_s
