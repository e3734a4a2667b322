"""Decoupled PPO's old-policy snapshots (verl V1 separate_async): N saves and 2 (N - 1) restores
of each training GPU's shard per step, pinned by hand, inside the old-log-prob phase only."""

from __future__ import annotations

import pytest

from rlsim.calibration.profile import datasheet_profile
from rlsim.catalog import get_llm
from rlsim.models import memory, old_policy
from rlsim.placement import resolve
from rlsim.scenario import load_scenario
from rlsim.simulator.costs import Costs

H100 = datasheet_profile("h100-sxm")
MOE = get_llm("qwen3-30b-a3b")

# the verl V1 separate_async trainer of the published rows: 16 GPUs, Megatron TP2 PP2 CP2 EP4
V1 = [
    "model=qwen3-30b-a3b",
    "cluster.nodes=4",
    "pipeline.mode=async",
    "pipeline.inference.gpus=16",
    "pipeline.inference.tp=4",
    "pipeline.training.gpus=16",
    "pipeline.training.data_parallel=megatron",
    "pipeline.training.tp=2",
    "pipeline.training.pp=2",
    "pipeline.training.cp=2",
    "pipeline.training.ep=4",
    "algorithm.minibatches=4",
]


def test_four_minibatches_make_four_saves_and_six_restores() -> None:
    shard = 4.0e9
    link = H100.host_link_gbps * 1e9
    # saves into pageable memory at 2 GB/s, restores from the pinned copy at the host link
    expected = 4 * shard / 2.0e9 + 6 * shard / link
    assert old_policy.snapshot_swaps_s(H100, shard, 4, 2.0) == pytest.approx(expected, rel=1e-12)
    # one minibatch: the save alone, nothing to restore
    assert old_policy.snapshot_swaps_s(H100, shard, 1, 2.0) == pytest.approx(shard / 2.0e9, rel=1e-12)
    # a save rate above the host link runs at the link
    assert old_policy.snapshot_swaps_s(H100, shard, 1, 1e6) == pytest.approx(shard / link, rel=1e-12)


def test_megatron_rank_keeps_its_tp_pp_shard_and_its_experts() -> None:
    # the dense part over TP x PP, the routed experts over EP x ETP x PP
    routed = memory._routed_params(MOE) / MOE.total_params
    assert 0.9 < routed < 1.0
    kept = memory.megatron_kept_fraction(MOE, tp=2, pp=2, ep=4, etp=1)
    assert kept == pytest.approx(((1 - routed) / 2 + routed / 4) / 2, rel=1e-12)
    # etp unset splits the experts by TP as well (Megatron-Core's default)
    assert memory.megatron_kept_fraction(MOE, 2, 2, 4) == pytest.approx(((1 - routed) / 2 + routed / 8) / 2)


def test_snapshots_add_to_the_old_logprob_phase_only() -> None:
    off = Costs(resolve(load_scenario("default", V1)))
    on = Costs(resolve(load_scenario("default", [*V1, "pipeline.training.old_policy_snapshots=true"])))
    lengths = [8192] * 512
    before, after = off.train_phases(lengths), on.train_phases(lengths)
    # the rank's bf16 buffers: Qwen3-30B-A3B at TP2 PP2 EP4 (ETP = TP) is ~4.4 GB a GPU
    shard = MOE.total_params * memory.megatron_kept_fraction(MOE, 2, 2, 4) * 2
    assert on.snapshot_shard_bytes() == pytest.approx(shard, rel=1e-12)
    assert 4.0e9 < shard < 5.0e9
    swaps = 4 * shard / 2.0e9 + 6 * shard / (H100.host_link_gbps * 1e9)
    assert after.logprob_s == pytest.approx(before.logprob_s + swaps, rel=1e-12)
    assert after.train_s == before.train_s and after.optimizer_s == before.optimizer_s


def test_bypass_mode_has_no_old_logprob_pass_and_no_snapshots() -> None:
    bypass = [*V1, "algorithm.recompute_old_logprobs=false"]
    off = Costs(resolve(load_scenario("default", bypass)))
    on = Costs(resolve(load_scenario("default", [*bypass, "pipeline.training.old_policy_snapshots=true"])))
    lengths = [8192] * 512
    assert on.train_phases(lengths) == off.train_phases(lengths)


def test_fsdp_snapshot_is_the_stored_shard() -> None:
    sc = ["pipeline.mode=async", "pipeline.training.old_policy_snapshots=true"]
    costs = Costs(resolve(load_scenario("default", sc)))
    tr = costs.res.scenario.pipeline.training
    expected = costs.llm.total_params * tr.stored_param_bytes / costs.shard_group_gpus()
    assert costs.snapshot_shard_bytes() == pytest.approx(expected, rel=1e-12)
