"""Training communication that adds to the compute, pinned by hand: Megatron TP's activation
collectives per layer and micro-batch, and Megatron DDP's once-per-minibatch gradient and
parameter sync in place of FSDP's per-micro-batch parameter gathers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlsim.calibration.profile import LinkFit, datasheet_profile
from rlsim.catalog import get_llm
from rlsim.models import footprint, train_step
from rlsim.placement import resolve
from rlsim.scenario import DataParallel, load_scenario
from rlsim.simulator.costs import Costs

H100 = datasheet_profile("h100-sxm")
L70 = get_llm("llama-3.1-70b")
KW = dict(reference_model=False, recompute_old_logprobs=False, critic=False)
NVLINK = LinkFit(busbw_gbps=360.0, latency_s=2e-5)
SLOW = LinkFit(busbw_gbps=10.0, latency_s=5e-5)


def shape(**kw) -> train_step.TrainShape:
    base = dict(
        gpus=16,
        tp=4,
        pp=2,
        micro_batch_tokens=4096,
        activation_recompute=False,
        minibatches=2,
        trainable_params=L70.total_params,
    )
    return train_step.TrainShape(**(base | kw))


def test_tp_activation_collectives_add_their_hand_computed_seconds_to_training() -> None:
    seqs = [4096] * 64  # 64 sequences of 4096 tokens: one per micro-batch
    quiet = shape(megatron_ddp=True)
    loud = replace(quiet, tp_link=NVLINK)
    a = train_step.train_phases(L70, H100, quiet, seqs, **KW)
    b = train_step.train_phases(L70, H100, loud, seqs, **KW)
    # dp = 16 / (4 x 2) = 2 ranks; each minibatch gives a rank 16 sequences = 16 micro-batches of 4096
    one = NVLINK.latency_s + 3 / 4 * 4096 * L70.hidden_size * footprint.BF16_BYTES / (NVLINK.busbw_gbps * 1e9)
    per_micro_pass = L70.num_layers / 2 * 4 * one  # this stage's 40 layers, 2 all-gathers + 2 reduce-scatters
    expected = 2 * 16 * 2 * per_micro_pass  # 2 minibatches x 16 micro-batches x (forward + backward)
    assert b.train_s - a.train_s == pytest.approx(expected)
    assert b.optimizer_s == a.optimizer_s


def test_recompute_and_log_prob_passes_trade_activations_once_per_forward() -> None:
    seqs = [4096] * 64
    base = shape(megatron_ddp=True, tp_link=NVLINK)
    kw = KW | {"recompute_old_logprobs": True}
    plain = train_step.train_phases(L70, H100, base, seqs, **kw)
    recompute = train_step.train_phases(L70, H100, replace(base, activation_recompute=True), seqs, **kw)
    comm_2 = train_step.tp_comm_s(L70, base, 16 * 4096, 16, 2.0)
    comm_3 = train_step.tp_comm_s(L70, base, 16 * 4096, 16, 3.0)
    assert comm_3 == pytest.approx(1.5 * comm_2)  # the recompute's forward trades them once more
    no_tp = replace(base, tp_link=None)
    lp_plain = train_step.train_phases(L70, H100, no_tp, seqs, **kw).logprob_s
    # the log-prob pass: one forward over all 32 sequences of a rank, 32 micro-batches
    assert plain.logprob_s - lp_plain == pytest.approx(train_step.tp_comm_s(L70, base, 32 * 4096, 32, 1.0))
    assert recompute.train_s > plain.train_s


def test_no_tp_group_trades_no_activations() -> None:
    assert train_step.tp_comm_s(L70, shape(tp=1, tp_link=NVLINK), 65536, 16, 2.0) == 0.0
    assert train_step.tp_comm_s(L70, shape(tp_link=None), 65536, 16, 2.0) == 0.0


def test_megatron_ddp_syncs_gradients_once_per_minibatch_instead_of_gathering_per_micro_batch() -> None:
    # one-sequence micro-batches over a slow link: FSDP's gathers dominate, Megatron's sync does not
    seqs = [4096] * 64
    fsdp = shape(tp=1, pp=1, shard_link=SLOW)
    megatron = replace(fsdp, megatron_ddp=True, replica_link=SLOW)
    f = train_step.train_phases(L70, H100, fsdp, seqs, **KW)
    m = train_step.train_phases(L70, H100, megatron, seqs, **KW)
    compute = (
        2
        * 3.0
        * train_step._compute_s(
            footprint.forward_flops(L70, 64 * 4096 / 2, 64 * 4096.0**2 / 2), H100, fsdp, 64 * 4096 / 16 / 2
        )
    )
    n, shard = 16, L70.total_params * footprint.BF16_BYTES
    sync = 2 * SLOW.latency_s + 2.0 * (n - 1) / n * shard / (SLOW.busbw_gbps * 1e9)
    assert m.train_s == pytest.approx(compute + 2 * sync)  # 2 minibatches, nothing hidden
    gathers = 2 * 2 * 3 * train_step._gather_s(L70, H100, fsdp)  # 2 minibatches x 2 micro-batches x 3 ops
    assert f.train_s == pytest.approx(max(compute, gathers))
    assert gathers > compute  # the FSDP pool is traffic-bound here
    # the log-prob pass (one forward) gathers the parameters per micro-batch under FSDP, never under Megatron
    kw = KW | {"recompute_old_logprobs": True}
    forward = train_step._compute_s(footprint.forward_flops(L70, 64 * 4096, 64 * 4096.0**2), H100, fsdp, 64 * 4096 / 16)
    assert train_step.train_phases(L70, H100, megatron, seqs, **kw).logprob_s == pytest.approx(forward)
    fsdp_lp = train_step.train_phases(L70, H100, fsdp, seqs, **kw).logprob_s
    assert fsdp_lp == pytest.approx(max(forward, 4 * train_step._gather_s(L70, H100, fsdp)))
    assert fsdp_lp > forward


def test_the_scenario_field_selects_megatron_and_the_tp_link() -> None:
    args = ["steps=2", "pipeline.training.tp=2", "pipeline.training.micro_batch_tokens=4096"]
    fsdp = Costs(resolve(load_scenario("default", args)))
    meg = Costs(resolve(load_scenario("default", args + ["pipeline.training.data_parallel=megatron"])))
    assert fsdp.train_shape.megatron_ddp is False and meg.train_shape.megatron_ddp is True
    assert fsdp.train_shape.tp_link == fsdp.train_profile.intra_node  # a TP2 group sits in one node
    assert meg.res.scenario.pipeline.training.data_parallel is DataParallel.megatron
    lengths = [2048] * 512
    assert meg.train_phases(lengths).train_s != fsdp.train_phases(lengths).train_s


def test_megatron_keeps_its_model_shard_whole_and_shards_only_the_optimizer() -> None:
    from rlsim.models.memory import train_bytes_per_gpu

    p = L70.total_params
    act = (2.0 * L70.hidden_size) * L70.num_layers * 4096 / 4  # recompute on, tp 4
    fsdp = train_bytes_per_gpu(L70, 64, 4, 4096, True, p, pp=4)
    meg = train_bytes_per_gpu(L70, 64, 4, 4096, True, p, pp=4, megatron=True)
    assert fsdp == pytest.approx(16.0 * p / 64 + act)
    assert meg == pytest.approx(4.0 * p / 16 + 12.0 * p / 64 + act)  # bf16 weights + grads per TP x PP shard


def test_expert_parallelism_splits_the_routed_experts_of_a_megatron_shard() -> None:
    """Qwen3-30B-A3B at TP2 EP8 on 16 GPUs: each rank keeps 1/8 of the routed experts, the dense part whole."""
    from rlsim.catalog import get_llm
    from rlsim.models.memory import train_bytes_per_gpu

    moe = get_llm("qwen3-30b-a3b")  # 48 MoE layers x 128 experts x 3 x 2048 x 768
    p = moe.total_params
    routed = 48 * 128 * 3 * 2048 * 768
    act = (2.0 * moe.hidden_size) * moe.num_layers * 4096 / 2  # recompute on, tp 2
    one = train_bytes_per_gpu(moe, 16, 2, 4096, True, p, megatron=True)
    eight = train_bytes_per_gpu(moe, 16, 2, 4096, True, p, megatron=True, ep=8)
    assert one == pytest.approx(4.0 * p / 2 + 12.0 * p / 16 + act)
    assert eight == pytest.approx(4.0 * ((p - routed) + routed / 8) / 2 + 12.0 * p / 16 + act)
    opt = 12.0 * p / 16
    assert eight - opt - act < 0.2 * (one - opt - act)  # the experts are 95% of the weights and gradients
    # FSDP shards everything over the pool already: expert parallelism changes nothing there
    assert train_bytes_per_gpu(moe, 16, 2, 4096, True, p, ep=8) == train_bytes_per_gpu(moe, 16, 2, 4096, True, p)


def test_a_megatron_pool_too_small_for_its_replicated_shard_is_refused() -> None:
    from rlsim.errors import ScenarioError

    args = ["model=llama-3.1-70b", "pipeline.training.gpus=64", "cluster.nodes=9", "pipeline.inference.tp=8"]
    args += ["pipeline.inference.gpus=8", "pipeline.training.micro_batch_tokens=1024", "pipeline.mode=async"]
    resolve(load_scenario("default", args))  # FSDP over 64 GPUs fits
    with pytest.raises(ScenarioError, match="pipeline.training.tp: .*raise tp or pp"):
        resolve(load_scenario("default", args + ["pipeline.training.data_parallel=megatron"]))  # 70B x 4 B whole


def test_an_offloaded_actor_brings_its_shard_back_for_each_training_phase() -> None:
    # verl's offloaded actor loads its FSDP shard before compute_log_prob and update_actor and
    # offloads it after each: 2 copies of the fp32 shard per phase at the pageable rate
    args = ["steps=2", "pipeline.training.fsdp_size=2", "algorithm.reference_model=true"]
    base = Costs(resolve(load_scenario("default", args)))
    off = Costs(resolve(load_scenario("default", args + ["pipeline.training.param_offload=true"])))
    lengths = [1024] * 256
    a, b = base.train_phases(lengths), off.train_phases(lengths)
    tr = off.res.scenario.pipeline.training
    shard = off.llm.total_params * 4 / 2  # fp32 FSDP shards over a group of 2
    trip = 2 * shard / (min(tr.offload_reload_gbps, off.train_profile.host_link_gbps) * 1e9)
    alg = off.res.scenario.algorithm
    passes = int(alg.recompute_old_logprobs) + 1  # the old log-probs (if recomputed) and the reference
    assert b.logprob_s - a.logprob_s == pytest.approx(passes * trip)
    assert b.train_s - a.train_s == pytest.approx(trip)
    assert trip > 10.0  # a 7B fp32 half-shard (15 GB) at 2 GB/s, there and back
    assert b.optimizer_s == a.optimizer_s
