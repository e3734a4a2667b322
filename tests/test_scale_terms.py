"""The model terms that decide large runs, each pinned by hand: eager decode, TP across nodes,
training at a fixed global batch (micro-batches, FSDP traffic, HSDP, TP, LoRA) and the three
parts of a weight sync (materialise, transport, load)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlsim.calibration.profile import LinkFit, datasheet_profile
from rlsim.catalog import get_gpu, get_llm
from rlsim.models import footprint, train_step, weight_sync
from rlsim.models.decode import allreduce_s, iteration_cost, runs_eager, vllm_graph_max_tokens
from rlsim.placement import graph_max_tokens, resolve
from rlsim.scenario import Transport, load_scenario
from rlsim.simulator.costs import Costs

H100 = datasheet_profile("h100-sxm")
H20 = datasheet_profile("h20")
Q7 = get_llm("qwen2.5-7b")
L70 = get_llm("llama-3.1-70b")
KW = dict(reference_model=False, recompute_old_logprobs=False, critic=False)


# ---------------------------------------------------------------- decode


def test_eager_iteration_at_batch_1_is_the_hosts_launch_time() -> None:
    graphs = iteration_cost(Q7, H100, 1, 1)
    eager = iteration_cost(Q7, H100, 1, 1, eager=True)
    floor = Q7.num_layers * H100.eager_layer_launch_s
    assert eager.floor_s == pytest.approx(floor)
    # the GPU's own time (one weight read) is shorter than the launches: the floor sets the iteration
    assert graphs.at(0) - graphs.fixed_s < floor
    assert eager.at(0) == pytest.approx(eager.fixed_s + floor)
    assert graphs.floor_s == 0.0


def test_eager_costs_nothing_once_the_gpu_work_is_longer_than_the_launches() -> None:
    big = 1024
    graphs, eager = iteration_cost(Q7, H20, 2, big), iteration_cost(Q7, H20, 2, big, eager=True)
    kv = big * 4000  # a large batch with long contexts: GPU-bound
    assert graphs.at(kv) - graphs.fixed_s > eager.floor_s
    assert eager.at(kv) == graphs.at(kv)


def test_enforce_eager_slows_the_tail_of_a_simulated_step() -> None:
    sc = load_scenario("default", ["steps=2"])
    eager = load_scenario("default", ["steps=2", "pipeline.inference.enforce_eager=true"])
    base, slow = Costs(resolve(sc)), Costs(resolve(eager))
    floor = Q7.num_layers * H100.eager_layer_launch_s
    assert slow.iteration(1).at(0) == pytest.approx(base.iteration(1).fixed_s + floor)
    assert slow.iteration(1).at(0) > 1.5 * base.iteration(1).at(0)


def test_a_step_runs_eager_above_the_largest_captured_graph() -> None:
    # vLLM pads a step up to the next captured size and runs a larger one without a graph
    assert not runs_eager(512, False, 512)
    assert runs_eager(513, False, 512)
    assert runs_eager(1, True, 512)  # enforce_eager: every step
    assert not runs_eager(100_000, False, None)  # graphs at every size


def test_a_decode_iteration_above_the_capture_size_takes_the_eager_floor() -> None:
    moe = get_llm("qwen3-30b-a3b")  # 48 layers, 3B active: a short GPU step at TP4
    floor = 48 * 3.4e-4  # layers x the datasheet profile's eager launch time per layer
    at_cap = iteration_cost(moe, H100, 4, 512, graph_max_tokens=512)
    above = iteration_cost(moe, H100, 4, 513, graph_max_tokens=512)
    graphed = iteration_cost(moe, H100, 4, 513)
    assert at_cap.floor_s == 0.0 and graphed.floor_s == 0.0
    assert above.floor_s == pytest.approx(floor)
    kv = 513 * 300  # short contexts: the GPU's work is shorter than the launches
    assert graphed.at(kv) - graphed.fixed_s < floor
    assert above.at(kv) == pytest.approx(above.fixed_s + floor)
    assert above.fixed_s == graphed.fixed_s


def test_the_capture_size_comes_from_the_scenario_with_vllms_default() -> None:
    sc = load_scenario("default", ["steps=2", "pipeline.inference.max_batch=1024"])
    assert sc.pipeline.inference.cuda_graph_max_tokens == "auto"  # vLLM's default for the GPU
    assert resolve(sc).graph_max_tokens == 512  # vLLM's max_cudagraph_capture_size on Hopper
    costs = Costs(resolve(sc))
    floor = Q7.num_layers * H100.eager_layer_launch_s
    assert costs.iteration(512).floor_s == 0.0
    assert costs.iteration(513).floor_s == pytest.approx(floor)
    wide = load_scenario(
        "default", ["steps=2", "pipeline.inference.max_batch=1024", "pipeline.inference.cuda_graph_max_tokens=1024"]
    )
    assert Costs(resolve(wide)).iteration(1024).floor_s == 0.0


def test_a_tp16_engine_spans_two_nodes_and_pays_the_network_per_all_reduce() -> None:
    sc = load_scenario(
        "default",
        [
            "model=llama-3.1-70b",
            "cluster.nodes=6",
            "pipeline.mode=sync",
            "pipeline.inference.gpus=16",
            "pipeline.inference.tp=16",
            "pipeline.training.gpus=32",
        ],
    )
    costs = Costs(resolve(sc))
    assert costs.tp_link == H100.inter_node
    hidden = 1 * L70.hidden_size * footprint.BF16_BYTES
    link = H100.inter_node
    comm = 2 * L70.num_layers * allreduce_s(link.busbw_gbps, link.latency_s, hidden, 16)
    assert costs.iteration(1).fixed_s == pytest.approx(H100.iteration_overhead_s + comm)
    within = iteration_cost(L70, H100, 8, 1)
    assert costs.iteration(1).fixed_s > within.fixed_s  # network latency per call, far above NVLink's


def test_tp_across_nodes_must_take_whole_nodes() -> None:
    from rlsim.errors import ScenarioError

    sc = load_scenario(
        "default",
        ["cluster.nodes=2", "pipeline.mode=sync", "pipeline.inference.gpus=12", "pipeline.inference.tp=12"],
    )
    with pytest.raises(ScenarioError, match="pipeline.inference.tp"):
        resolve(sc)


# ---------------------------------------------------------------- training


def _shape(gpus: int, **kw) -> train_step.TrainShape:
    base = dict(
        gpus=gpus,
        tp=1,
        pp=1,
        micro_batch_tokens=16384,
        activation_recompute=True,
        minibatches=4,
        trainable_params=Q7.total_params,
    )
    return train_step.TrainShape(**{**base, **kw})


def test_a_micro_batch_holds_what_a_minibatch_gives_a_rank() -> None:
    """At a fixed global batch, more ranks each hold fewer tokens: MFU follows the real tokens."""
    lengths = [512] * 256  # 131,072 tokens, 4 minibatches: 32,768 per minibatch
    slow = H100.model_copy(update={"train_tokens_half": 8192.0})  # a pronounced saturation curve
    free = LinkFit(busbw_gbps=1e9, latency_s=0.0)  # no traffic cost: compute alone
    fwd = footprint.forward_flops(Q7, 131_072, 256 * 512**2)
    times = {}
    for gpus in (1, 2, 8, 32):
        ph = train_step.train_phases(Q7, slow, _shape(gpus, shard_link=free), lengths, **KW)
        per_rank = 32_768 / gpus
        micro = -(-per_rank // 16384)  # 2 micro-batches on one GPU, one below the cap otherwise
        tokens = per_rank / micro
        rate = gpus * 989e12 * slow.train_mfu * tokens / (tokens + 8192)
        assert ph.train_s == pytest.approx(4 * fwd / rate, rel=1e-9)
        times[gpus] = ph.train_s
    assert times[32] > times[8] / 4  # 4x the GPUs, less than 4x faster: each holds 1/4 of the tokens


def test_tensor_parallel_ranks_see_every_token_of_the_micro_batch() -> None:
    """Megatron TP splits weights, not tokens: the MFU curve reads the micro-batch's tokens."""
    assert train_step.mfu(H100, _shape(8, tp=2), 2048) == train_step.mfu(H100, _shape(8, tp=1), 2048)


def test_halving_a_pool_less_than_doubles_training_when_fsdp_traffic_is_exposed() -> None:
    lengths = [1024] * 128
    free = LinkFit(busbw_gbps=1e9, latency_s=0.0)
    compute16 = train_step.train_phases(Q7, H100, _shape(16, shard_link=free), lengths, **KW).train_s
    compute8 = train_step.train_phases(Q7, H100, _shape(8, shard_link=free), lengths, **KW).train_s
    # compute alone: half the ranks, twice the tokens each, a little higher MFU: under twice the time
    assert 1.5 * compute16 < compute8 < 2 * compute16
    # a link on which the 16-GPU pool's traffic (two all-gathers and a reduce-scatter per
    # micro-batch, 4 minibatches of one micro-batch) takes 1.5x its compute
    per_op = 1.5 * compute16 / 12
    link = LinkFit(busbw_gbps=15 / 16 * footprint.weight_bytes(Q7) / per_op / 1e9, latency_s=0.0)
    full = train_step.train_phases(Q7, H100, _shape(16, shard_link=link), lengths, **KW)
    half = train_step.train_phases(Q7, H100, _shape(8, shard_link=link), lengths, **KW)
    assert full.train_s == pytest.approx(1.5 * compute16, rel=1e-9)  # the traffic is exposed
    assert half.train_s == pytest.approx(compute8, rel=1e-9)  # 8 GPUs: compute hides it again
    assert full.train_s < half.train_s < 2 * full.train_s  # half the GPUs, less than twice the time
    assert half.train_s / full.train_s < compute8 / compute16  # and less than compute alone would say


def test_hsdp_gathers_inside_the_group_and_all_reduces_across_replicas() -> None:
    lengths = [1024] * 128
    free = LinkFit(busbw_gbps=1e9, latency_s=0.0)
    hsdp = _shape(16, fsdp_size=2, shard_link=free, replica_link=H100.inter_node)
    assert hsdp.shard_ranks == 2 and hsdp.replicas == 8
    compute = train_step.train_phases(Q7, H100, _shape(16, shard_link=free), lengths, **KW).train_s
    got = train_step.train_phases(Q7, H100, hsdp, lengths, **KW).train_s
    grad_shard = Q7.total_params * footprint.BF16_BYTES / 2  # one rank's shard of the bf16 gradients
    link = H100.inter_node
    per_minibatch = link.latency_s + 2 * 7 / 8 * grad_shard / (link.busbw_gbps * 1e9)
    assert got == pytest.approx(compute + 4 * per_minibatch, rel=1e-9)


def test_lora_backward_costs_one_forward() -> None:
    lengths = [1024] * 64
    full = train_step.train_phases(Q7, H100, _shape(8, activation_recompute=False), lengths, **KW)
    adapters = footprint.lora_params(Q7, 16, ["q", "k", "v", "o"])
    lora = train_step.train_phases(
        Q7, H100, _shape(8, activation_recompute=False, trainable_params=adapters), lengths, **KW
    )
    assert lora.train_s == pytest.approx(full.train_s * 2 / 3, rel=1e-9)  # fwd + dX, no dW


def test_a_measured_moe_training_rate_replaces_the_dense_datasheet_mfu() -> None:
    """The V1 async rows train Qwen3-30B-A3B at Megatron-Bridge's measured 121 TFLOP/s per H100
    (0.122 of the BF16 peak) instead of the dense 0.45: compute-bound phases take 0.45 / 0.122
    as long as at the dense MFU, and the training FLOPs are the active parameters' (3.3B of 30.5B).
    The measured rate holds the MoE layers' own costs (grouped GEMMs, permutations), so none is
    added on top: the dense-MFU reference is the model without its MoE layout."""
    q30 = get_llm("qwen3-30b-a3b")
    lengths = [4096] * 64
    free = LinkFit(busbw_gbps=1e9, latency_s=0.0)
    shape = _shape(8, shard_link=free, trainable_params=q30.total_params)
    dense_rate = train_step.train_phases(q30.model_copy(update={"moe": None}), H100, shape, lengths, **KW)
    measured = train_step.train_phases(q30, H100, replace(shape, mfu_override=0.122), lengths, **KW)
    assert measured.train_s == pytest.approx(dense_rate.train_s * 0.45 / 0.122, rel=1e-9)
    fwd = footprint.forward_flops(q30, 64 * 4096, 64 * 4096**2)
    tokens = 8192  # 32,768 per rank over 4 minibatches: one micro-batch of 8,192 each
    rate = 8 * 989e12 * 0.122 * tokens / (tokens + H100.train_tokens_half)
    assert measured.train_s == pytest.approx(4 * fwd / rate, rel=1e-9)  # fwd + 2 backward + recompute


# ---------------------------------------------------------------- weight sync


def _path(**kw) -> weight_sync.SyncPath:
    base = dict(link=H100.inter_node, engines=2, engine_tp=4, filesystem_gbps=2.0, bucket_bytes=512e6)
    return weight_sync.SyncPath(**{**base, **kw})


def test_weight_sync_is_materialise_plus_transport_plus_load() -> None:
    payload = footprint.weight_bytes(Q7)
    path = _path(shard_gpus=16, shard_link=H100.inter_node, offloaded=True, per_call_s=weight_sync.SERVER_CALL_S)
    calls = 28 * 12 + 3  # q, k, v and their biases, o, gate, up, down, two norms per layer; embed, norm, head
    assert weight_sync.tensor_count(Q7) == calls
    reload = payload / 16 / (weight_sync.PAGEABLE_RELOAD_GBPS * 1e9)  # bf16 shards (the path's default)
    gather = 15 / 16 * payload / (H100.inter_node.busbw_gbps * 1e9) + calls * H100.inter_node.latency_s
    wire = calls * H100.inter_node.latency_s + payload / (H100.inter_node.busbw_gbps * 1e9)
    load = 2 * payload / 4 / (H100.memory_gbps * 1e9)
    bucketed = weight_sync.sync_s(Q7, H100, Transport.nccl_bucketed, path, payload)
    buckets = payload / 512e6
    host = calls * weight_sync.TENSOR_HOST_S + buckets * weight_sync.SERVER_CALL_S
    wire_b = buckets * H100.inter_node.latency_s + payload / (H100.inter_node.busbw_gbps * 1e9)
    assert bucketed == pytest.approx(reload + gather + host + wire_b + load, rel=1e-12)
    # one broadcast per tensor: the loop's host work (a request each) against the device's transfers
    per_tensor = weight_sync.sync_s(Q7, H100, Transport.nccl_broadcast, path, payload)
    host = calls * (weight_sync.TENSOR_HOST_S + weight_sync.SERVER_CALL_S) + reload
    assert per_tensor == pytest.approx(max(host, gather + wire + load), rel=1e-12)
    assert per_tensor == pytest.approx(host, rel=1e-12)  # 339 requests of ~21 ms outlast 15 GB at 46 GB/s


def test_an_engine_server_pays_its_api_per_tensor() -> None:
    payload = footprint.weight_bytes(Q7)
    nvlink = H100.intra_node  # the transfers hide under the host work either way
    inproc = weight_sync.sync_s(Q7, H100, Transport.nccl_broadcast, _path(link=nvlink), payload)
    server = weight_sync.sync_s(
        Q7, H100, Transport.nccl_broadcast, _path(link=nvlink, per_call_s=weight_sync.SERVER_CALL_S), payload
    )
    calls = weight_sync.tensor_count(Q7)
    assert server - inproc == pytest.approx(calls * (weight_sync.SERVER_CALL_S - weight_sync.IN_PROCESS_CALL_S))


def test_scenario_fields_reach_the_sync_model() -> None:
    base = ["pipeline.mode=one_step_off", "pipeline.weight_sync.transport=nccl_broadcast"]
    plain = Costs(resolve(load_scenario("default", base))).sync_s
    server = Costs(resolve(load_scenario("default", [*base, "pipeline.weight_sync.update_api=server"]))).sync_s
    offload = Costs(resolve(load_scenario("default", [*base, "pipeline.training.param_offload=true"]))).sync_s
    assert server > plain + 5.0  # ~340 tensors x 19 ms
    # 4 training GPUs hold an fp32 shard each, back from pageable memory at 2 GB/s, on the loop's host side
    reload = 2 * footprint.weight_bytes(Q7) / 4 / (weight_sync.PAGEABLE_RELOAD_GBPS * 1e9)
    assert offload == pytest.approx(plain + reload, rel=1e-9)


def test_fsdp_size_must_divide_the_data_parallel_ranks() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="fsdp_size"):
        load_scenario("default", ["pipeline.mode=sync", "pipeline.training.gpus=4", "pipeline.training.fsdp_size=3"])


def test_a_moe_layer_costs_at_least_its_fused_kernels_latency() -> None:
    moe = get_llm("qwen3-30b-a3b")
    bw = H100.memory_gbps * 1e9 * 4
    layers = footprint.moe_layers(moe)
    one = iteration_cost(moe, H100, 4, 1)
    # batch 1 reads the 8 experts it touched (a TP4 shard of each): far below the kernel's floor
    routed = footprint.routed_bytes_per_layer(moe, 1) / bw
    assert routed < H100.moe_layer_floor_s
    dense = footprint.decode_weight_bytes(moe, 1) / bw
    assert one.mem0_s == pytest.approx(dense + layers * (H100.moe_layer_floor_s - routed), rel=1e-12)
    # at a large batch the bytes of all experts exceed the floor: the weight read is bandwidth-bound again
    big = iteration_cost(moe, H100, 1, 512)
    assert big.mem0_s == pytest.approx(footprint.decode_weight_bytes(moe, 512) / (H100.memory_gbps * 1e9))
    # a dense model never pays it
    assert iteration_cost(Q7, H100, 1, 1).mem0_s == pytest.approx(
        footprint.decode_weight_bytes(Q7, 1) / (H100.memory_gbps * 1e9)
    )


def test_serial_host_work_per_sequence_adds_to_every_iteration() -> None:
    base = iteration_cost(Q7, H20, 2, 1024)
    old = iteration_cost(Q7, H20, 2, 1024, host_per_sequence_s=1.3e-4)
    assert old.fixed_s == pytest.approx(base.fixed_s + 1024 * 1.3e-4)
    assert old.at(2_000_000) - base.at(2_000_000) == pytest.approx(1024 * 1.3e-4)
    sc = load_scenario("default", ["pipeline.inference.host_per_sequence_s=1e-4"])
    assert Costs(resolve(sc)).iteration(64).fixed_s == pytest.approx(
        Costs(resolve(load_scenario("default"))).iteration(64).fixed_s + 64e-4
    )


def test_v0_sampler_traffic_is_batch_times_vocab_bytes_on_one_gpu() -> None:
    # vLLM 0.6's greedy sampler moves 42 bytes a logit (fp32 copy 6, scale 8, softmax 8, log-softmax
    # 8, gathered copy 8, argmax 4), V1's greedy path 10: 32 more. Llama 3.1's vocabulary is 128,256,
    # an H100 datasheet profile streams at 0.8 x 3.35 TB/s: 256 x 128,256 x 32 B = 1.0507 GB -> 0.392 ms
    l8 = get_llm("llama-3.1-8b")
    assert l8.vocab_size == 128_256 and H100.memory_gbps == pytest.approx(2680.0)
    expected = 256 * 128_256 * 32 / 2.68e12
    assert expected == pytest.approx(3.9204e-4, rel=1e-4)
    base = iteration_cost(l8, H100, 1, 256)
    v0 = iteration_cost(l8, H100, 1, 256, sampler_bytes_per_logit=32)
    assert v0.fixed_s - base.fixed_s == pytest.approx(expected)
    assert (v0.mem0_s, v0.mem_per_token_s, v0.comp0_s) == (base.mem0_s, base.mem_per_token_s, base.comp0_s)
    # a TP4 engine samples on rank 0 after gathering the logits: one GPU's bandwidth, not four
    tp4 = iteration_cost(L70, H100, 4, 256, sampler_bytes_per_logit=32)
    assert tp4.fixed_s - iteration_cost(L70, H100, 4, 256).fixed_s == pytest.approx(expected)
    # unset, every iteration is what it was
    assert iteration_cost(l8, H100, 1, 256, sampler_bytes_per_logit=0.0) == base
    costs = Costs(resolve(load_scenario("default", ["pipeline.inference.sampler_bytes_per_logit=32"])))
    extra = 64 * costs.llm.vocab_size * 32 / (costs.profile.memory_gbps * 1e9)
    assert costs.iteration(64).fixed_s == pytest.approx(
        Costs(resolve(load_scenario("default"))).iteration(64).fixed_s + extra
    )


def test_a_clip_fraction_sends_that_share_of_responses_to_the_limit() -> None:
    import numpy as np

    from rlsim.workload import GroupSampler

    def share_at_cap(sets: list[str]) -> float:
        sc = load_scenario("default", ["algorithm.group_size=16", *sets])
        draws = GroupSampler(sc, np.random.default_rng(0)).draw_many(2000)
        lengths = np.array([n for g in draws for n in g.response_tokens])
        return float((lengths == sc.workload.response_tokens.max).mean())

    plain = share_at_cap([])
    clipped = share_at_cap(["workload.response_tokens.clip_fraction=0.05"])
    # 32,000 draws: the bulk's own share at the cap plus 5% of the rest, within a few standard errors
    assert clipped == pytest.approx(plain + (1 - plain) * 0.05, abs=0.006)
    assert clipped > plain + 0.04


def test_context_parallel_all_to_alls_by_hand() -> None:
    link = LinkFit(busbw_gbps=100.0, latency_s=1e-5)
    free = LinkFit(busbw_gbps=1e9, latency_s=0.0)
    lengths = [8192] * 16
    kw = dict(shard_link=free, activation_recompute=False, minibatches=1)
    plain = train_step.train_phases(Q7, H100, _shape(16, cp=2, **kw), lengths, **KW)
    cp = train_step.train_phases(Q7, H100, _shape(16, cp=2, a2a_link=link, **kw), lengths, **KW)
    per_rank = 8192 * 16 / 8  # 8 data-parallel ranks of 2 context-parallel GPUs
    width = (2 * Q7.hidden_size + 2 * Q7.num_kv_heads * Q7.head_dim) * 2
    one_pass = Q7.num_layers * (2 * link.latency_s + per_rank / 2 * width * 0.5 / 100e9)
    assert cp.train_s - plain.train_s == pytest.approx(2 * one_pass, rel=1e-9)  # forward + backward
    # each CP rank holds half of every sequence: the MFU curve reads half the micro-batch's tokens
    assert train_step.mfu(H100, _shape(16, cp=2), 4096) == train_step.mfu(H100, _shape(16), 2048)


def test_expert_parallel_all_to_alls_by_hand_and_only_for_moe() -> None:
    from rlsim.errors import ScenarioError

    moe = get_llm("qwen3-30b-a3b")
    link = LinkFit(busbw_gbps=100.0, latency_s=1e-5)
    shape = _shape(8, ep=4, a2a_link=link, activation_recompute=False, minibatches=1)
    per_rank = 4096.0
    volume = per_rank * 8 * moe.hidden_size * 2  # each token to its 8 experts
    one_pass = footprint.moe_layers(moe) * 2 * (link.latency_s + volume * 3 / 4 / 100e9)
    assert train_step.all_to_all_s(moe, shape, per_rank) == pytest.approx(one_pass, rel=1e-12)
    assert train_step.all_to_all_s(Q7, shape, per_rank) == 0.0  # a dense model has no experts to reach
    with pytest.raises(ScenarioError, match="pipeline.training.ep"):
        resolve(load_scenario("default", ["pipeline.mode=sync", "pipeline.training.ep=2"]))


def test_context_parallelism_splits_a_micro_batchs_activations() -> None:
    from rlsim.models.memory import train_bytes_per_gpu

    one = train_bytes_per_gpu(Q7, 8, 1, 65536, False, Q7.total_params)
    two = train_bytes_per_gpu(Q7, 8, 1, 65536, False, Q7.total_params, cp=2)
    states = 16 * Q7.total_params / 8
    assert two - states == pytest.approx((one - states) / 2)


# ---------------------------------------------------------------- saturation at the roofline ridge


def test_half_saturation_tokens_move_with_the_roofline_ridge() -> None:
    """A GEMM of t tokens is compute-bound past t ~ peak FLOP/s / bytes/s: H20's ridge is 1/8 of H100's."""
    ridge = (148.0 / 4.0) / (989.0 / 3.35)  # H20 and H100 SXM datasheet bf16 TFLOPS over TB/s
    assert H20.train_tokens_half == pytest.approx(H100.train_tokens_half * ridge, rel=1e-3)
    assert H20.matmul_tokens_half == pytest.approx(H100.matmul_tokens_half * ridge, rel=1e-3)
    # so a Megatron micro-batch of two ~750-token sequences trains near full MFU on an H20 only
    h20 = train_step.mfu_at_tokens(H20, 1500) / H20.train_mfu
    h100 = train_step.mfu_at_tokens(H100, 1500) / H100.train_mfu
    assert h20 > 0.95 > h100 > 0.7


def test_h20_reads_kv_at_the_h100_fit_scaled_by_its_measured_kernel_efficiency() -> None:
    """InferSim's FlashInfer decode kernel, same shapes on both GPUs: an H20 reads KV at a median
    0.815 of the fraction of peak an H800 (the H100's die and HBM3) reaches, so the H100 fit's
    0.70 becomes 0.70 x 0.815 = 0.571 -> 0.57 on the H20; every other GPU keeps 0.70."""
    h800 = datasheet_profile("h800")
    assert 0.70 * 0.815 == pytest.approx(0.57, abs=0.005)
    assert H20.attention_gbps == pytest.approx(4000.0 * 0.57)  # 2,280 GB/s of 4.0 TB/s
    assert H100.attention_gbps == pytest.approx(3350.0 * 0.70)  # 2,345 GB/s, unchanged
    assert h800.attention_gbps == pytest.approx(3350.0 * 0.70)
    # the weight reads keep the H100 measurement's 80%: only the KV reads were measured
    assert H20.memory_gbps == pytest.approx(4000.0 * 0.80)
    # a memory-bound attention (Qwen2.5-7B at TP2: 2 KV heads of 128 per GPU and layer, 7 query
    # heads each, 7 FLOPs a KV byte against the H20's 37) now reads 1M cached tokens in
    # 28 layers x 1,024 B x 1e6 / 2,280 GB/s = 12.6 ms an iteration, 0.70 / 0.57 of the 10.2 ms before
    batch, kv = 1024, 1_000_000
    kv_bytes = Q7.num_layers * 2 * 2 * 128 * 2 * kv  # per GPU of the TP2 engine
    cost = iteration_cost(Q7, H20, 2, batch)
    attention_s = cost.at(kv) - cost.at(0)
    assert attention_s == pytest.approx(kv_bytes / (H20.attention_gbps * 1e9), rel=1e-9)
    assert attention_s == pytest.approx(0.0126, abs=5e-5)
    assert attention_s / (kv_bytes / (4000.0 * 0.70 * 1e9)) == pytest.approx(0.70 / 0.57)


def test_a_pageable_optimizer_offload_runs_at_its_own_rate_not_the_host_link() -> None:
    """NeMo RL's `state[k] = v.to("cpu")`: 12 bytes a parameter over the GPUs, each way, at 2 GB/s."""
    from rlsim.models.switch import switch_s

    profile = datasheet_profile("h100-sxm")
    params, gpus = 8.0e9, 8
    pinned = switch_s(profile, gpus, params, 0.0, True, False, 0.5)
    pageable = switch_s(profile, gpus, params, 0.0, True, False, 0.5, optimizer_gbps=2.0)
    assert pinned == pytest.approx(0.5 + 12 * params / gpus / (profile.host_link_gbps * 1e9))
    assert pageable == pytest.approx(0.5 + 12 * params / gpus / 2e9)  # 6 s of a 12 GB shard
    # a rate above the link is capped by it; the engine weights keep the link's rate
    assert switch_s(profile, gpus, params, 0.0, True, False, 0.5, optimizer_gbps=1e6) == pytest.approx(pinned)
    with_engine = switch_s(profile, gpus, params, 16e9, True, True, 0.5, optimizer_gbps=2.0)
    assert with_engine - pageable == pytest.approx(16e9 / (profile.host_link_gbps * 1e9))
    sc = load_scenario("default", ["pipeline.mode=colocated", "pipeline.colocation.optimizer_offload_gbps=2"])
    assert Costs(resolve(sc)).switch_s > Costs(resolve(load_scenario("default", ["pipeline.mode=colocated"]))).switch_s


def test_rl_rows_on_vllm_v1_pay_the_random_sampling_passes_beyond_greedy() -> None:
    # vLLM V1 (0.8.5-0.11) at temperature 1, top_p 1, top_k -1, logprobs=0, one read and one write a
    # pass: greedy is the fp32 copy (2 + 4) and argmax (4) = 10 bytes a logit; random sampling adds
    # the temperature division (4 + 4), softmax (4 + 4), the exponential draw (4), probs.div_(q)
    # (4 + 4 + 4) = 32, and logprobs=0 log_softmax(dtype=float32) of the bf16 logits, which PyTorch
    # runs as a copy to fp32 (2 + 4) then an fp32 log-softmax (4 + 4), and the sampled token's rank
    # (0.8.5/0.9: >= then sum, 4 + 1 + 1; 0.10+: one compiled read, 4); logprobs=1 a top-1 (4)
    v1_random = 8 + 8 + 4 + 12
    log_softmax = 6 + 8
    assert v1_random + log_softmax + 6 == 52 and v1_random + log_softmax + 4 == 50
    assert v1_random + log_softmax + 4 + 4 == 54
    from rlsim.validation.published import published_rows
    from rlsim.validation.published_run import _scenario

    rows = {r.id: r for r in published_rows()}
    expect = {"verl-osp-fsdp2-sync": 52, "openrlhf-verl-7b-1k": 52, "nemo-rl-llama8b-1n": 52}
    expect |= {"nemo-rl-v04-llama8b-sync": 50, "verl-fa-sync-32": 50, "verl-fa-async-64-64": 54}
    for rid, nbytes in expect.items():
        assert rows[rid].scenario["pipeline"]["inference"]["sampler_bytes_per_logit"] == nbytes, rid
    # the verl-osp row: Qwen2.5-Math-7B (vocabulary 152,064) on an H20 engine of TP2 at 1,024
    # sequences; the H20 datasheet profile streams at 0.8 x 4.0 TB/s, and V1 samples on every rank
    # of the TP group at once (all-gathered logits), so one GPU's bandwidth carries it:
    # 1,024 x 152,064 x 52 B = 8.097 GB -> 2.530 ms an iteration
    costs = Costs(resolve(_scenario(rows["verl-osp-fsdp2-sync"])))
    assert costs.llm.vocab_size == 152_064 and costs.profile.memory_gbps == pytest.approx(3200.0)
    expected = 1024 * 152_064 * 52 / 3.2e12
    assert expected == pytest.approx(2.5303e-3, rel=1e-4)
    greedy = iteration_cost(costs.llm, costs.profile, 2, 1024, eager=True)
    sampled = iteration_cost(costs.llm, costs.profile, 2, 1024, eager=True, sampler_bytes_per_logit=52)
    assert sampled.fixed_s - greedy.fixed_s == pytest.approx(expected)
    # and the row's engine charges it: the same row with the field unset is that much faster
    unset = rows["verl-osp-fsdp2-sync"].model_copy(deep=True)
    del unset.scenario["pipeline"]["inference"]["sampler_bytes_per_logit"]
    plain = Costs(resolve(_scenario(unset)))
    assert costs.iteration(1024).fixed_s - plain.iteration(1024).fixed_s == pytest.approx(expected)


def test_the_verl_v1_async_rows_pay_vllm_024s_processed_logprobs_sampling() -> None:
    # vLLM 0.24 under verl's logprobs_mode processed_logprobs, temperature 1, top_p 1, top_k -1,
    # logprobs=0, one read and one write a pass: beyond greedy's fp32 copy and argmax, the
    # temperature division (4 + 4), log_softmax of the scaled fp32 logits (4 + 4, no bf16 copy),
    # softmax (4 + 4), the exponential draw (4), probs.div_(q) (4 + 4 + 4), the compiled rank (4)
    v024 = (4 + 4) + (4 + 4) + (4 + 4) + 4 + (4 + 4 + 4) + 4
    assert v024 == 44
    from rlsim.validation.published import published_rows
    from rlsim.validation.published_run import _scenario

    rows = {r.id: r for r in published_rows()}
    ids = ["v1-async-sync-4nodes", "v1-async-separate-4nodes", "v1-async-separate-3nodes"]
    for rid in ids:
        assert rows[rid].scenario["pipeline"]["inference"]["sampler_bytes_per_logit"] == v024, rid
    # Qwen3.5-35B-A3B's 248,320 logits a sequence at 256 sequences on the H100 datasheet profile
    # (0.8 x 3.35 TB/s): 256 x 248,320 x 44 B = 2.797 GB -> 1.0437 ms an iteration
    costs = Costs(resolve(_scenario(rows["v1-async-sync-4nodes"])))
    assert costs.llm.vocab_size == 248_320 and costs.profile.memory_gbps == pytest.approx(2680.0)
    expected = 256 * 248_320 * 44 / 2.68e12
    assert expected == pytest.approx(1.0437e-3, rel=1e-4)
    unset = rows["v1-async-sync-4nodes"].model_copy(deep=True)
    del unset.scenario["pipeline"]["inference"]["sampler_bytes_per_logit"]
    plain = Costs(resolve(_scenario(unset)))
    assert costs.iteration(256).fixed_s - plain.iteration(256).fixed_s == pytest.approx(expected)


def test_vllms_default_capture_size_is_1024_on_compute_capability_10_only() -> None:
    """vLLM PR 49390: `1024 if is_device_capability_family(100) else 512`, family = capability // 10."""
    assert vllm_graph_max_tokens(10) == 1024  # B200, GB200 (10.0), B300 (10.3)
    assert vllm_graph_max_tokens(9) == 512  # Hopper
    assert vllm_graph_max_tokens(12) == 512  # RTX Blackwell is family 12
    assert vllm_graph_max_tokens(None) == 512  # AMD, CPU, no cited capability
    assert get_gpu("b200").compute_capability.major == 10
    assert get_gpu("gb200").compute_capability.major == 10
    assert get_gpu("h100-sxm").compute_capability.major == 9
    assert get_gpu("mi300x").compute_capability is None


def test_a_blackwell_engine_decodes_up_to_1024_sequences_from_graphs() -> None:
    """On a B200 'auto' resolves to 1,024: 513..1,024 sequences pay no launch floor, 1,025 does;
    an H100 engine still pays it at 513, and a value the user sets is kept on a B200."""
    base = ["steps=2", "pipeline.inference.max_batch=1100"]
    b200 = Costs(resolve(load_scenario("default", [*base, "cluster.gpu=b200"])))
    floor = Q7.num_layers * 3.4e-4  # layers x the datasheet profiles' eager launch time per layer
    assert b200.res.graph_max_tokens == 1024
    assert [b200.iteration(b).floor_s for b in (512, 513, 768, 1024)] == [0.0] * 4
    assert b200.iteration(1025).floor_s == pytest.approx(floor)
    h100 = Costs(resolve(load_scenario("default", base)))
    assert h100.iteration(512).floor_s == 0.0
    assert h100.iteration(513).floor_s == pytest.approx(floor)
    pinned = load_scenario("default", [*base, "cluster.gpu=b200", "pipeline.inference.cuda_graph_max_tokens=512"])
    assert Costs(resolve(pinned)).iteration(513).floor_s == pytest.approx(floor)
    every = load_scenario("default", [*base, "cluster.gpu=b200", "pipeline.inference.cuda_graph_max_tokens=null"])
    assert Costs(resolve(every)).iteration(1100).floor_s == 0.0


def test_the_capture_size_follows_the_engines_pool_gpu() -> None:
    """A GPU type per pool: the inference pool's GPU sets vLLM's default, not the cluster's."""
    inf = load_scenario("default", ["steps=2"]).pipeline.inference
    assert graph_max_tokens(inf, "gb200") == 1024
    assert graph_max_tokens(inf, "h200") == 512
    assert graph_max_tokens(inf, "cpu") == 512
    assert graph_max_tokens(inf.model_copy(update={"cuda_graph_max_tokens": 256}), "b200") == 256
