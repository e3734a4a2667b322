"""Weight-sync terms of the published component rows, each pinned by hand: checkpoint tensors
counted from the architecture (an MoE stores one per expert and projection), their serial host
work in a bucketed update, the sender's measured export rate, the broadcast's link by where the
pools sit, and a single controller's Ray calls per bucket (NeMo RL's refit)."""

from __future__ import annotations

import pytest

from rlsim.calibration.profile import datasheet_profile
from rlsim.catalog import get_llm
from rlsim.models import footprint, weight_sync
from rlsim.placement import resolve
from rlsim.scenario import Transport, load_scenario
from rlsim.simulator.costs import Costs

H100 = datasheet_profile("h100-sxm")
H20 = datasheet_profile("h20")
Q7 = get_llm("qwen2.5-7b")
A3B = get_llm("qwen3-30b-a3b")
DSV3 = get_llm("deepseek-v3")


def _path(**kw) -> weight_sync.SyncPath:
    base = dict(link=H100.inter_node, engines=2, engine_tp=4, filesystem_gbps=2.0, bucket_bytes=2048e6)
    return weight_sync.SyncPath(**{**base, **kw})


def test_tensors_are_counted_from_the_architecture() -> None:
    # Qwen2.5-7B: q, k, v, their biases, o, gate, up, down, two norms; embedding, final norm, LM head
    assert weight_sync.tensor_count(Q7) == 28 * 12 + 3
    # Qwen3-30B-A3B: q, k, v, o, q/k norms, two norms, 128 experts x 3 projections, the router
    assert weight_sync.tensor_count(A3B) == 48 * (4 + 2 + 2 + 128 * 3 + 1) + 3 == 18_867
    # DeepSeek-V3: MLA (q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b, o), 3 dense layers, then
    # 256 routed experts, the router and one shared expert
    mla = 7 + 2
    assert weight_sync.tensor_count(DSV3) == 3 * (mla + 3) + 58 * (mla + 256 * 3 + 1 + 3) + 3


def test_a_bucketed_moe_update_pays_host_work_per_expert_tensor_not_per_bucket() -> None:
    payload = footprint.weight_bytes(A3B)
    server = weight_sync.SERVER_CALL_S
    with_host = weight_sync.sync_s(A3B, H100, Transport.nccl_bucketed, _path(per_call_s=server), payload)
    without = weight_sync.sync_s(A3B, H100, Transport.nccl_bucketed, _path(per_call_s=server, tensor_host_s=0), payload)
    assert with_host - without == pytest.approx(18_867 * 1e-3)  # ~19 s of a ~61 GB update
    # bigger buckets save requests (20 ms each), not the tensors' host work
    big = weight_sync.sync_s(
        A3B, H100, Transport.nccl_bucketed, _path(per_call_s=server, bucket_bytes=4 * 2048e6), payload
    )
    buckets = payload / 2048e6
    assert with_host - big == pytest.approx((buckets - buckets / 4) * (server + H100.inter_node.latency_s))
    # a dense model of about the same bytes has 24x fewer tensors
    q32 = get_llm("qwen2.5-32b")
    assert weight_sync.tensor_count(q32) * 24 < weight_sync.tensor_count(A3B)


def test_a_measured_export_adds_to_the_gather_tensor_by_tensor() -> None:
    payload = footprint.weight_bytes(Q7)
    link = H100.intra_node
    gather = 7 / 8 * payload / (link.busbw_gbps * 1e9) + weight_sync.tensor_count(Q7) * link.latency_s
    plain = weight_sync.materialise_s(Q7, H100, _path(shard_gpus=8, shard_link=link), payload)
    assert plain == pytest.approx(gather)
    slow = weight_sync.materialise_s(Q7, H100, _path(shard_gpus=8, shard_link=link, export_gbps=9.2), payload)
    # rank 0 packs each tensor after its gather and gathers the next after packing: the two add
    assert slow == pytest.approx(gather + payload / 9.2e9)  # 1.66 s of packing + 0.04 s over NVLink


def test_where_the_pools_sit_decides_the_broadcast_link() -> None:
    # 12 training + 4 inference GPUs on 2 x 8: training takes node 0 and half of node 1
    assert weight_sync.sender_node(12, 4, 8, all_trainer_ranks=False) == (False, 1)
    assert weight_sync.sender_node(12, 4, 8, all_trainer_ranks=True) == (False, 8)
    # 4 + 4 on one node: every engine GPU sits next to the sender
    assert weight_sync.sender_node(4, 4, 8, all_trainer_ranks=False) == (True, 5)
    intra, inter = H20.intra_node, H20.inter_node
    assert weight_sync.broadcast_link(intra, inter, True, 1) == intra
    alone = weight_sync.broadcast_link(intra, inter, False, 1)
    assert alone.busbw_gbps == inter.busbw_gbps and alone.latency_s == inter.latency_s
    relayed = weight_sync.broadcast_link(intra, inter, False, 8)
    assert relayed.busbw_gbps == min(intra.busbw_gbps, 8 * inter.busbw_gbps)
    assert weight_sync.broadcast_link(intra, inter, False, 2).busbw_gbps == 2 * inter.busbw_gbps


def _osp(*extra: str) -> Costs:
    base = [
        "model=qwen2.5-7b",
        "cluster.gpu=h20",
        "cluster.nodes=2",
        "pipeline.mode=one_step_off",
        "pipeline.inference.gpus=4",
        "pipeline.inference.tp=2",
        "pipeline.training.gpus=12",
        "pipeline.training.fsdp_size=2",
        "pipeline.weight_sync.transport=nccl_broadcast",
    ]
    return Costs(resolve(load_scenario("default", [*base, *extra])))


def test_a_group_of_every_trainer_rank_carries_the_broadcast_over_the_senders_nics() -> None:
    sender = _osp().sync_s
    group = _osp("pipeline.weight_sync.broadcast_group=all_trainer_ranks").sync_s
    payload = footprint.weight_bytes(Q7)
    n = weight_sync.tensor_count(Q7)
    one_nic = payload / (H20.inter_node.busbw_gbps * 1e9)
    gather = weight_sync.gather_s(Q7, _path(shard_gpus=2, shard_link=H20.intra_node, stored_param_bytes=4), payload)
    load = 2.0 * payload / 2 / (H20.memory_gbps * 1e9)
    # through one NIC the 15 GB take longer than the loop's host work: the transfers set the time
    assert sender == pytest.approx(gather + n * H20.inter_node.latency_s + one_nic + load)
    # through the 8 ranks' NICs they hide under it: 339 tensors at ~1 ms
    assert group == pytest.approx(n * weight_sync.TENSOR_HOST_S) and group < sender


def test_a_single_controller_pays_one_ray_call_per_worker_per_bucket() -> None:
    base = ["model=qwen2.5-7b", "pipeline.mode=colocated", "pipeline.weight_sync.transport=cuda_ipc"]
    base += ["pipeline.weight_sync.bucket_mb=4000"]
    plain = Costs(resolve(load_scenario("default", base)))
    nemo = Costs(resolve(load_scenario("default", [*base, "pipeline.weight_sync.via_controller=true"])))
    sc = nemo.res.scenario
    buckets = footprint.weight_bytes(Q7) / 4000e6
    calls = sc.training_gpus + sc.engines
    assert nemo.sync_s - plain.sync_s == pytest.approx(buckets * calls * weight_sync.CONTROLLER_CALL_S)
    # 64 workers and 16 engines refitting a 70B in 6.4 GB groups: ~0.6 s of serial controller work
    l70 = footprint.weight_bytes(get_llm("llama-3.1-70b"))
    assert 0.5 < l70 / 6.4e9 * 80 * weight_sync.CONTROLLER_CALL_S < 0.7
