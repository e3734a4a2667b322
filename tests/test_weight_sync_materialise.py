"""The trainer's side of a weight update, pinned by hand: shards stored in fp32 are gathered and
reloaded in fp32, an offloaded shard comes back at the pageable rate, rank 0's gather and
packing add up tensor by tensor (verl's 72B sender), and a per-tensor broadcast loop takes the
longer of its host work and its transfers (verl one-step-off)."""

from __future__ import annotations

import pytest

from rlsim.calibration.profile import datasheet_profile
from rlsim.catalog import get_llm
from rlsim.models import footprint, weight_sync
from rlsim.placement import resolve
from rlsim.scenario import Transport, load_scenario
from rlsim.simulator.costs import Costs

H100 = datasheet_profile("h100-sxm")
Q7 = get_llm("qwen2.5-7b")
Q72 = get_llm("qwen2.5-72b")


def _path(**kw) -> weight_sync.SyncPath:
    base = dict(link=H100.inter_node, engines=2, engine_tp=1, filesystem_gbps=2.0, bucket_bytes=2048e6)
    return weight_sync.SyncPath(**{**base, **kw})


def test_fp32_shards_are_gathered_in_fp32() -> None:
    payload = footprint.weight_bytes(Q72)  # 145 GB in bf16
    link = H100.inter_node
    bf16 = weight_sync.gather_s(Q72, _path(shard_gpus=32, shard_link=link), payload)
    fp32 = weight_sync.gather_s(Q72, _path(shard_gpus=32, shard_link=link, stored_param_bytes=4), payload)
    latency = weight_sync.tensor_count(Q72) * link.latency_s
    assert fp32 - latency == pytest.approx(2 * (bf16 - latency))
    # 31/32 of 291 GB over a 46 GB/s network: ~6 s of the 72B sender's 23.5 s (verl issue 7060)
    assert 5.5 < fp32 < 6.5


def test_an_offloaded_shard_returns_at_the_pageable_rate_in_its_stored_dtype() -> None:
    payload = footprint.weight_bytes(Q7)
    path = _path(shard_gpus=8, offloaded=True, stored_param_bytes=4)
    # each of 8 GPUs copies its 1/8 of 30.5 GB of fp32 at 2 GB/s, all at once: ~1.9 s
    assert weight_sync.reload_s(H100, path, payload) == pytest.approx(2 * payload / 8 / 2.0e9)
    # a pinned offload is bounded by the host link
    pinned = _path(shard_gpus=8, offloaded=True, stored_param_bytes=4, reload_gbps=1e4)
    assert weight_sync.reload_s(H100, pinned, payload) == pytest.approx(2 * payload / 8 / (H100.host_link_gbps * 1e9))
    assert weight_sync.reload_s(H100, _path(shard_gpus=8, stored_param_bytes=4), payload) == 0.0


def test_materialise_is_reload_then_gather_then_pack() -> None:
    payload = footprint.weight_bytes(Q7)
    path = _path(shard_gpus=16, shard_link=H100.inter_node, offloaded=True, stored_param_bytes=4, export_gbps=9.2)
    total = weight_sync.materialise_s(Q7, H100, path, payload)
    parts = weight_sync.reload_s(H100, path, payload) + weight_sync.gather_s(Q7, path, payload)
    assert total == pytest.approx(parts + payload / 9.2e9)


def test_a_per_tensor_broadcast_hides_its_transfers_under_its_host_work() -> None:
    payload = footprint.weight_bytes(Q7)
    n = weight_sync.tensor_count(Q7)
    fast = _path(link=H100.intra_node, shard_gpus=2, shard_link=H100.intra_node, stored_param_bytes=4)
    got = weight_sync.sync_s(Q7, H100, Transport.nccl_broadcast, fast, payload)
    assert got == pytest.approx(n * weight_sync.TENSOR_HOST_S)  # 339 tensors at 1 ms; NVLink moves 15 GB in less
    # over a slow link the transfers are the longer side and the host work hides under them
    slow_link = H100.inter_node.model_copy(update={"busbw_gbps": 5.0})
    slow = weight_sync.sync_s(Q7, H100, Transport.nccl_broadcast, _path(link=slow_link), payload)
    load = 2.0 * payload / (H100.memory_gbps * 1e9)
    assert slow == pytest.approx(n * slow_link.latency_s + payload / 5e9 + load)


def _sc(*extra: str) -> Costs:
    base = [
        "model=qwen2.5-7b",
        "cluster.nodes=2",
        "pipeline.mode=async",
        "pipeline.inference.gpus=8",
        "pipeline.training.gpus=8",
        "pipeline.weight_sync.transport=nccl_bucketed",
    ]
    return Costs(resolve(load_scenario("default", [*base, *extra])))


def test_the_scenario_fields_set_the_stored_dtype_and_the_reload_rate() -> None:
    payload = footprint.weight_bytes(Q7)
    fp32, bf16 = _sc().sync_s, _sc("pipeline.training.sharded_param_bytes=2").sync_s
    link = H100.intra_node  # FSDP over the 8 GPUs of node 0
    assert fp32 - bf16 == pytest.approx(7 / 8 * payload / (link.busbw_gbps * 1e9))
    on = _sc("pipeline.training.param_offload=true").sync_s
    assert on - fp32 == pytest.approx(2 * payload / 8 / 2.0e9)
    pinned = _sc("pipeline.training.param_offload=true", "pipeline.training.offload_reload_gbps=25").sync_s
    assert pinned - fp32 == pytest.approx(2 * payload / 8 / 25e9)
